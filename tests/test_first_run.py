"""What a new user meets first, from a fresh clone: each command says which Redis it used, and refuses to write to
one nothing named; ``sign`` says when it prints a path only and lists only what a link carries; the site keys'
and a brand file's refusals say what is wrong once; a source host that does not resolve is unavailable, not bad
input, to the operator's command line. Real Redis (conftest's), the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from quoteclip import links
from quoteclip.errors import BadInput
from quoteclip.settings import Settings

SECRET = "0123456789abcdef-first-run"
QUOTE = {"source": "https://www.youtube.com/watch?v=dQw4w9WgXcQ", "start": 1.0, "end": 4.0}


def command(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``quoteclip ARGS`` as a user runs it in ``cwd``: none of this process's Redis or quoteclip settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QUOTECLIP_") and k != "REDIS_URL"}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True,
        text=True,
        env={**clean, **env},
        cwd=cwd,
        timeout=120,
    )


def entries(url: str) -> list[bytes]:
    with redis.Redis.from_url(url) as client:
        return sorted(client.scan_iter("quoteclip:links:revoked:*"))


def test_revoke_refuses_the_unnamed_fallback_and_writes_to_the_redis_up_recorded(
    redis_url: str, tmp_path: Path
) -> None:
    link = links.sign(QUOTE, "starzero", SECRET, "https://clips.example")
    keys = {"QUOTECLIP_SITE_KEYS": f"starzero:{SECRET}"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = command("revoke", link, "--json", env=keys, cwd=elsewhere)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = json.loads(refused.stdout)["error"]
    assert said.startswith("bad input: no Redis named: set QUOTECLIP_REDIS_URL to the service's Redis, or run it in")
    assert "where `quoteclip up` runs" in said and "redis://127.0.0.1:6379/0" in said
    # the folder where ``up`` runs: its embedded Redis's URL recorded under the clip folder (quoteclip/embedded.py)
    service = tmp_path / "service"
    (service / "clips" / ".redis").mkdir(parents=True)
    (service / "clips" / ".redis" / "url").write_text(redis_url + "\n")
    done = command("revoke", link, env=keys, cwd=service)
    assert done.returncode == 0, done.stderr
    assert f"in Redis {redis_url} " in done.stdout
    assert entries(redis_url) == [f"quoteclip:links:revoked:{links.link_hash(links.path_of(link))}".encode()]
    as_json = command("revoke", link, "--json", env=keys, cwd=service)
    assert json.loads(as_json.stdout)["redis"] == redis_url


def test_revoke_says_when_the_text_is_no_link_at_all(tmp_path: Path, redis_url: str) -> None:
    env = {"QUOTECLIP_SITE_KEYS": f"starzero:{SECRET}", "QUOTECLIP_REDIS_URL": redis_url}
    for text in ("not a link", "https://clips.example/l/starzero/nothing"):
        refused = command("revoke", text, env=env, cwd=tmp_path)
        assert refused.returncode == 2
        assert refused.stderr.startswith(f"quoteclip: bad input: link: not a link URL, got {text!r}"), refused.stderr
        assert "/l/SITE[.KEYID]/PAYLOAD.SIGNATURE.mp4" in refused.stderr
    forged = links.sign(QUOTE, "starzero", "another-secret-0123456789")
    refused = command("revoke", forged, env=env, cwd=tmp_path)
    assert "not a valid link of this service's live keys" in refused.stderr
    assert entries(redis_url) == []


def test_health_names_the_redis_it_checked_its_password_hidden(tmp_path: Path, redis_url: str) -> None:
    down = command(
        "health", "--json", env={"QUOTECLIP_REDIS_URL": "redis://:hunter2-secret@127.0.0.1:1/0"}, cwd=tmp_path
    )
    assert down.returncode == 1
    body = json.loads(down.stdout)
    assert body["redis"] == "unreachable: ConnectionError" and body["redis_url"] == "redis://***@127.0.0.1:1/0"
    assert "hunter2" not in down.stdout + down.stderr
    up = command("health", env={"QUOTECLIP_REDIS_URL": redis_url}, cwd=tmp_path)
    assert f"redis: ok ({redis_url})" in up.stdout, up.stdout + up.stderr


def test_sign_warns_of_a_path_and_lists_only_what_a_link_carries(tmp_path: Path) -> None:
    env = {"QUOTECLIP_SITE_KEYS": f"starzero:{SECRET}"}
    args = ("sign", QUOTE["source"], "--start", "1", "--end", "4", "--site", "starzero")
    bare = command(*args, env=env, cwd=tmp_path)
    assert bare.returncode == 0 and bare.stdout.startswith("/l/starzero/")
    assert "a path (/l/…), to be put after the service's address" in bare.stderr
    assert "--base-url" in bare.stderr and "QUOTECLIP_LINK_BASE_URL" in bare.stderr
    based = command(*args, "--base-url", "https://clips.example", env=env, cwd=tmp_path)
    assert based.returncode == 0 and based.stdout.startswith("https://clips.example/l/") and based.stderr == ""
    shown = command("sign", "--help", env={"COLUMNS": "200"}, cwd=tmp_path).stdout
    for name in ("--profiles", "--pad-before", "--encoder-preset", "--font", "--style-file"):
        assert name not in shown, name
    assert "instant" not in shown and "--quality" in shown and "--profile " in shown
    assert "--snap" in shown and "--transcript" in shown  # (the words a link is snapped to when it is signed)
    refused = command(*args, "--profiles", "vertical,square", env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "--profiles: a link cannot carry it" in refused.stderr


def test_a_key_over_its_longest_clip_is_named(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"id": "news", "secret": SECRET, "max_seconds": 10}]}))
    refused = command(
        "sign", QUOTE["source"], "--start", "1", "--end", "50", "--site", "news",
        env={"QUOTECLIP_SITE_KEYS_FILE": str(keys)}, cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "end: the clip is 49 s long, over the 10 s the key news allows" in refused.stderr


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("starzero", "QUOTECLIP_SITE_KEYS entry 'starzero': no secret: write SITE:SECRET or SITE:KEYID:SECRET"),
        ("starzero:", "QUOTECLIP_SITE_KEYS entry 'starzero': no secret: write SITE:SECRET or SITE:KEYID:SECRET"),
        ("starzero:short", "QUOTECLIP_SITE_KEYS entry 'starzero': secret must be text of at least 16 characters"),
        (
            "starzero:k1:short",
            "QUOTECLIP_SITE_KEYS entry 'starzero': the secret of key k1 must be text of at least 16 characters",
        ),
    ],
)
def test_site_key_entries_say_what_is_wrong_once(value: str, said: str) -> None:
    with pytest.raises(BadInput) as refused:
        Settings.from_env({"QUOTECLIP_SITE_KEYS": value})
    assert str(refused.value) == said


def test_a_brand_file_with_a_platform_and_profiles_is_refused_naming_both(tmp_path: Path) -> None:
    from cli.options import ClipOptions, load_brand_style, specs_from_options

    brand = tmp_path / "brand.json"
    brand.write_text(json.dumps({"platform": "shorts", "profiles": "landscape,square"}))
    with pytest.raises(BadInput, match="style file names both platform and profiles"):
        load_brand_style(str(brand))
    opts = ClipOptions(source="clip.mp4", start="1", end="4", style_file=str(brand))
    with pytest.raises(BadInput, match="both platform and profiles"):
        specs_from_options(opts, Settings.from_env({}).for_cli())


def test_a_source_host_that_does_not_resolve_is_unavailable_to_the_command_line(tmp_path: Path) -> None:
    """The operator's command line says what failed (exit 1: it may pass); the service's answer for it stays the
    one a private address gets (tests/test_hardening_pages.py)."""
    args = ("--start", "1", "--end", "2")
    gone = command("render", "http://no-such-host.invalid/x.mp4", *args, env={}, cwd=tmp_path)
    assert gone.returncode == 1, gone.stderr
    assert gone.stderr.startswith("quoteclip: source unavailable: no-such-host.invalid does not resolve (DNS: ")
    private = command("render", "http://127.0.0.1:9/x.mp4", *args, env={}, cwd=tmp_path)
    assert private.returncode == 2
    assert "source refused: source address not allowed: 127.0.0.1 does not resolve to a public address" in (
        private.stderr
    )
