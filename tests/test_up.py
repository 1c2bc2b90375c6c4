"""``quoteclip up`` on a machine with nothing but the pip install: an embedded Redis, the API, the page and a
worker, stopped cleanly; the other commands find the embedded server on their own."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from conftest import run_cli

from quoteclip import embedded
from testkit.faces import answers, start_up
from testkit.services import wait_for


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
    up, base = start_up(tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: answers(base), 60, "quoteclip up to answer /healthz")
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
    wait_for(lambda: not any(_alive(c) for c in children), 10, f"up's children to exit: {children}")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _status(base: str, job_id: str) -> str:
    code, data, _ = _get(f"{base}/clips/{job_id}")
    body = json.loads(data)
    assert body["status"] != "failed", body
    return str(body["status"])


def test_up_refuses_a_bad_worker_count(tmp_path: Path) -> None:
    done = run_cli("up", "--workers", "0", env={"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")})
    assert done.returncode == 2 and done.stderr.strip() == "quoteclip: bad input: workers must be at least 1, got 0"


def test_up_uses_its_embedded_redis_unless_one_is_named(tmp_path) -> None:
    """A Redis given with --redis or configured is used and said so; with none named, an embedded one, even when a
    Redis answers at the default address (the machine's own does here: its database may be another program's)."""
    from cli.up import choose_redis
    from quoteclip.errors import BadInput
    from quoteclip.settings import Settings

    settings = Settings(storage_dir=tmp_path / "clips")
    assert choose_redis({"QUOTECLIP_REDIS_URL": "redis://r:1/3"}, settings, "auto") == (
        "redis://r:1/3",
        False,
        "configured (QUOTECLIP_REDIS_URL)",
    )
    assert choose_redis({"QUOTECLIP_REDIS_URL": "redis://r:1/3"}, settings, "redis://other:2/0")[:2] == (
        "redis://other:2/0",
        False,
    )
    assert choose_redis({"QUOTECLIP_REDIS_URL": "redis://r:1/3"}, settings, "embedded")[1] is True
    url, embedded, how = choose_redis({}, settings, "auto")
    assert (url, embedded) == ("", True) and how.startswith("embedded") and "QUOTECLIP_REDIS_URL" in how
    with pytest.raises(BadInput, match="--redis must be a Redis URL"):
        choose_redis({}, settings, "mysql://x")


def test_up_dev_allows_local_sources_on_a_loopback_bind_only(tmp_path) -> None:
    from cli.up import dev_env
    from quoteclip.errors import BadInput
    from quoteclip.settings import DEFAULT_SOURCE_HOSTS, Settings

    settings = Settings(storage_dir=tmp_path / "clips")
    env = dev_env({}, settings, "127.0.0.1")
    assert env == {"QUOTECLIP_ALLOW_LOCAL_SOURCES": "true", "QUOTECLIP_ALLOW_LOOPBACK": "true"}  # one switch
    queued = Settings.from_env(env).for_queue()  # what the children read back
    assert queued.allow_local_sources is True
    assert {"127.0.0.1", "localhost", *DEFAULT_SOURCE_HOSTS} <= set(queued.source_hosts or ())
    assert {"127.0.0.0/8", "::1/128"} <= set(queued.allow_addresses)
    listed = Settings.from_env({**env, "QUOTECLIP_SOURCE_HOSTS": "example.com"})  # hosts listed: loopback's added
    assert set(listed.source_hosts or ()) == {"example.com", "127.0.0.1", "localhost", "::1"}
    with pytest.raises(BadInput, match="loopback only, got 0.0.0.0"):
        dev_env({}, settings, "0.0.0.0")
    done = run_cli("up", "--dev", "--host", "0.0.0.0", env={"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")})
    assert done.returncode == 2 and "loopback only" in done.stderr and "Traceback" not in done.stderr
