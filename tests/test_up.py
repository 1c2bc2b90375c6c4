"""``quoteclip up`` on a machine with nothing but the pip install: an embedded Redis, the API, the page and a
worker, stopped cleanly; the other commands find the embedded server on their own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from conftest import run_cli

from quoteclip import embedded
from testkit.services import free_port, wait_for


def _get(url: str) -> tuple[int, bytes, dict[str, str]]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(url, timeout=10) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_up_runs_the_whole_system_with_an_embedded_redis(media, http_source, tmp_path) -> None:
    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=6, gop=60))
    store = tmp_path / "clips"
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUOTECLIP_") and k != "REDIS_URL"}
    env.update(
        QUOTECLIP_STORAGE_DIR=str(store),
        QUOTECLIP_SOURCE_HOSTS="127.0.0.1",
        QUOTECLIP_ALLOW_ADDRESSES="127.0.0.1/32",
        QUOTECLIP_CACHE_DIR=str(tmp_path / "cache"),
        TMPDIR=str(tmp_path),
    )
    port = free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "cli", "up", "--redis", "embedded", "--port", str(port), "--workers", "1"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _healthy(base), 60, "quoteclip up to answer /healthz")
        url = embedded.recorded_url(store)
        assert url is not None and url.startswith("redis://127.0.0.1:")
        assert (store / ".redis" / "appendonlydir").is_dir()  # its data lives under the clip folder
        assert _get(base + "/")[0] == 200  # the page

        status, job = _post(
            base + "/clips",
            {
                "source": http_source.url("ep.mp4"),
                "start": 1,
                "end": 3,
                "caption": "one machine",
                "watermark": "StarZero",
            },
        )
        assert status == 202, job
        wait_for(lambda: _status(base, str(job["id"])) == "finished", 120, "the clip to render")
        code, _, headers = _get(base + str(job["download_url"]))
        assert code == 302
        code, data, _ = _get(base + headers["location"])
        assert code == 200 and data[4:8] == b"ftyp"

        # The other commands, with no Redis URL configured, find the embedded server through the clip folder.
        cli_env = {"QUOTECLIP_STORAGE_DIR": str(store)}
        shown = run_cli("status", str(job["id"]), "--json", env=cli_env)
        assert shown.returncode == 0 and json.loads(shown.stdout)["status"] == "finished", shown.stderr
        health = run_cli("health", "--json", env=cli_env)
        assert health.returncode == 0 and json.loads(health.stdout)["redis"] == "ok", health.stderr
        children = psutil.Process(up.pid).children(recursive=True)
        assert len(children) >= 3  # the server, the API, a worker
    finally:
        up.send_signal(signal.SIGTERM)
        _, err = up.communicate(timeout=60)
    assert up.returncode == 0, err
    assert "Traceback" not in err
    assert embedded.recorded_url(store) is None  # the URL is withdrawn with the server
    time.sleep(0.5)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def _healthy(base: str) -> bool:
    try:
        return _get(base + "/healthz")[0] == 200
    except OSError:
        return False


def _status(base: str, job_id: str) -> str:
    code, data, _ = _get(f"{base}/clips/{job_id}")
    body = json.loads(data)
    assert body["status"] != "failed", body
    return str(body["status"])


def test_up_refuses_a_bad_worker_count(tmp_path: Path) -> None:
    done = run_cli("up", "--workers", "0", env={"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")})
    assert done.returncode == 2 and done.stderr.strip() == "quoteclip: bad input: workers must be at least 1, got 0"


@pytest.mark.integration  # (asks the machine's Redis on 6379)
def test_up_says_how_it_chose_its_redis(tmp_path) -> None:
    """A Redis configured is "configured"; one merely found answering at the default address is said to be found,
    with the database it shares; with none, an embedded one."""
    from cli.up import FOUND, choose_redis
    from quoteclip.settings import Settings

    settings = Settings(storage_dir=tmp_path / "clips")
    assert choose_redis({"QUOTECLIP_REDIS_URL": "redis://r:1/3"}, settings, "auto") == (
        "redis://r:1/3",
        False,
        "configured",
    )
    assert choose_redis({}, settings, "embedded")[1:] == (True, "embedded")
    url, embedded, how = choose_redis({}, settings, "auto")  # the machine's own Redis answers on 6379
    assert (url, embedded, how) == (Settings.redis_url, False, FOUND) and "database 0" in how and "shared" in how
