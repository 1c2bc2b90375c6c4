"""The command line as a user meets it: one JSON object on stdout, exit codes 0/1/2, readable errors."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import run_cli, runs
from mediacheck import assert_same_encode


@pytest.mark.slow
def test_render_json_then_cached_without_ffmpeg(media, tmp_path, ffmpeg_counter) -> None:
    wrapper, log = ffmpeg_counter
    src = media(size="640x360", duration=6)
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": wrapper}
    args = [
        "render",
        str(src),
        "--start",
        "0:01.0",
        "--end",
        "0:03.5",
        "--caption",
        "It's 5:00 \\ done",
        "--watermark",
        "StarZero",
        "--json",
    ]
    first = run_cli(*args, env=env)
    assert first.returncode == 0, first.stderr
    body = json.loads(first.stdout)  # exactly one JSON object and nothing else
    assert first.stdout.count("\n") == 1
    assert body["status"] == "finished" and body["cached"] is False
    assert (body["width"], body["height"], body["duration"]) == (1280, 720, 2.5)
    assert body["link"] == Path(body["path"]).as_uri() and body["link"].endswith(f"/clips/{body['key']}.mp4")
    assert Path(body["path"]).is_file()
    rendered = runs(log)
    assert rendered == 1

    second = run_cli(*args, env=env)
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["cached"] is True and again["key"] == body["key"] and again["link"] == body["link"]
    assert runs(log) == rendered  # no ffmpeg ran for the cached clip


@pytest.mark.slow
def test_default_storage_dir_is_clips_in_cwd(media, tmp_path) -> None:
    src = media(size="320x180", duration=4, gop=60)
    done = run_cli("render", str(src), "--start", "1", "--end", "2", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert Path(json.loads(done.stdout)["path"]).parent == tmp_path / "clips"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--start", "10", "--end", "5"], "end must be after start, got start=10.0 end=5.0"),
        (["--start", "ten", "--end", "5"], "start: start must be seconds, MM:SS(.fff) or HH:MM:SS(.fff), got 'ten'"),
        (["--start", "0", "--end", "601"], "over the 600 s limit"),
        (["--start", "0", "--end", "1", "--profile", "tiktok"], "profile: Input should be"),
        (["--start", "0", "--end", "1", "--caption", "x" * 1001], "caption: String should have at most 1000"),
        (["--start", "0", "--end", "1", "--font", "/no/such.ttf"], "font file not found"),
        (["--start", "0", "--end", "1", "--watermark-opacity", "7", "--watermark", "S"], "watermark.opacity"),
        (["--start", "0", "--end", "1", "--watermark", "/no/logo.png"], "watermark.logo file not found"),
        (["--start", "1", "--end", "9"], "end: quote ends after the end of the video (end=0:09.000, video is 0:04.000"),
    ],
)
def test_bad_input_exits_2_with_one_line(media, tmp_path, args, message) -> None:
    """One line on stderr, exit 2, and with --json the error as the one JSON object on stdout."""
    src = media(size="320x180", duration=4, gop=60)
    done = run_cli("render", str(src), *args, "--json", env={"QUOTECLIP_STORAGE_DIR": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    body = json.loads(done.stdout)
    assert body["status"] == "failed" and body["exit_code"] == 2 and message in body["error"]
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["render", "a.mp4", "--strat", "1"], "bad input: No such option: --strat"),
        (["render", "a.mp4", "--watermark-opacity", "abc"], "bad input: Invalid value for '--watermark-opacity'"),
        (["render"], "bad input: Missing argument 'source'"),
        (["batch", "a.mp4"], "bad input: Missing argument 'quotes_file'"),
    ],
)
def test_usage_errors_are_one_line_like_every_other_error(args: list[str], message: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2 and done.stderr.startswith(f"quoteclip: {message}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "╭" not in done.stderr and done.stdout == ""
    as_json = run_cli(*args, "--json")
    assert as_json.returncode == 2 and message in json.loads(as_json.stdout)["error"]


def test_help_shows_every_choice_and_no_type_boxes() -> None:
    shown = run_cli("render", "--help", env={"COLUMNS": "200"})
    text = " ".join(shown.stdout.split())
    assert shown.returncode == 0 and "speaker" in text and "top-left | top-right | bottom-left | bottom-right" in text
    assert "<bool>" not in shown.stdout and "╭" not in shown.stdout


def test_placing_a_mark_without_a_mark_is_said(media, tmp_path) -> None:
    """--watermark-opacity (or -position, -size) without --watermark has nothing to apply to: a warning says so."""
    src = media(size="320x180", duration=4, gop=60)
    args = ["render", str(src), "--start", "1", "--end", "2", "--watermark-opacity", "0.5", "--quality", "instant"]
    done = run_cli(*args, env={"QUOTECLIP_STORAGE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "warning: --watermark-opacity has no watermark to apply to" in done.stderr


@pytest.mark.slow
def test_bad_sources(tmp_path) -> None:
    notvideo = tmp_path / "x.mp4"
    notvideo.write_text("hello")
    for source, code, message in [
        (str(tmp_path / "missing.mp4"), 2, "source not found"),  # a path given wrong is bad input, as a folder is
        (str(notvideo), 2, "source is not a readable video file"),
        ("ftp://host/x.mp4", 2, "source scheme 'ftp' is not supported"),
        (str(tmp_path), 2, "source is not a file"),
    ]:
        done = run_cli("render", source, "--start", "0", "--end", "1", env={"QUOTECLIP_STORAGE_DIR": str(tmp_path)})
        assert done.returncode == code, (source, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr


def test_missing_required_option_is_usage_error() -> None:
    done = run_cli("render", "a.mp4", "--start", "1")
    assert done.returncode == 2 and "end: required (or give --transcript and --caption" in done.stderr
    unknown = run_cli("render", "a.mp4", "--start", "1", "--end", "2", "--bogus")
    assert unknown.returncode == 2 and "--bogus" in unknown.stderr


@pytest.mark.slow
def test_render_failure_exits_1_with_ffmpeg_tail(media, tmp_path) -> None:
    broken = tmp_path / "ffmpeg-broken"
    broken.write_text("#!/bin/sh\necho 'Unknown encoder libx264 (simulated)' >&2\nexit 1\n")
    broken.chmod(0o755)
    src = media(size="320x180", duration=4, gop=60)
    done = run_cli(
        "render",
        str(src),
        "--start",
        "1",
        "--end",
        "2",
        env={"QUOTECLIP_STORAGE_DIR": str(tmp_path / "c"), "FFMPEG_BINARY": str(broken)},
    )
    assert done.returncode == 1
    assert "render failed: ffmpeg exited with code 1" in done.stderr
    assert "Unknown encoder libx264 (simulated)" in done.stderr
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())


@pytest.mark.slow
def test_bad_environment_exits_2(tmp_path) -> None:
    done = run_cli("render", "a.mp4", "--start", "0", "--end", "1", env={"QUOTECLIP_LINK_TTL": "soon"})
    assert done.returncode == 2 and "QUOTECLIP_LINK_TTL must be a number, got 'soon'" in done.stderr
    done = run_cli("render", "a.mp4", "--start", "0", "--end", "1", env={"QUOTECLIP_ENCODER_PRESET": "slow"})
    assert done.returncode == 2 and "QUOTECLIP_ENCODER_PRESET must be one of veryfast, superfast" in done.stderr
    done = run_cli("render", "a.mp4", "--start", "0", "--end", "1", "--encoder-preset", "slow")
    assert done.returncode == 2 and "encoder_preset: Input should be 'veryfast', 'superfast'" in done.stderr


@pytest.mark.slow
def test_demo_renders_offline(tmp_path) -> None:
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = run_cli("demo", "--json", env=env)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["width"], body["height"], body["duration"]) == (1280, 720, 7.0)
    # where it wrote what, said on stderr (--json keeps stdout one object)
    assert re.search(
        rf"the sample source \(\d+ MB\) is kept at {re.escape(str(tmp_path))}/cache/quoteclip/", done.stderr
    )
    assert f"the clip is written under {tmp_path / 'clips'}" in done.stderr, done.stderr


def test_cli_takes_any_public_host_but_queue_only_allowed_ones(media, tmp_path, http_source, redis_url) -> None:
    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=4, gop=60))
    env = {
        "QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"),
        "QUOTECLIP_CACHE_DIR": str(tmp_path / "cache"),
        "QUOTECLIP_REDIS_URL": redis_url,
    }
    url = http_source.url("ep.mp4")
    refused = run_cli("render", url, "--start", "1", "--end", "2", env=env)
    assert refused.returncode == 2
    assert (
        "source refused: source address not allowed: 127.0.0.1 does not resolve to a public address "
        "(QUOTECLIP_ALLOW_ADDRESSES opens private networks)"
    ) in refused.stderr
    env["QUOTECLIP_ALLOW_ADDRESSES"] = "127.0.0.1"
    done = run_cli("render", url, "--start", "1", "--end", "2", "--json", env=env)
    assert done.returncode == 0, done.stderr
    queued = run_cli("enqueue", url, "--start", "1", "--end", "3", env=env)
    assert queued.returncode == 2
    assert "source host not allowed: 127.0.0.1 (see QUOTECLIP_SOURCE_HOSTS; for a server on this machine: " in (
        queued.stderr
    )
    assert http_source.requests["ep.mp4"] >= 1


def test_one_switch_allows_loopback_sources_everywhere(media, tmp_path, http_source, redis_url) -> None:
    """A local web server as a source needed two settings learned by failing (its host and its address), and
    sign --check refused what up --dev allowed. QUOTECLIP_ALLOW_LOOPBACK=true alone opens both, for the queue and
    for sign --check alike; without it, the refusal names it."""
    (http_source.root / "ep.mp4").symlink_to(media(size="320x180", duration=4, gop=60))
    url = http_source.url("ep.mp4")
    env = {
        "QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"),
        "QUOTECLIP_CACHE_DIR": str(tmp_path / "cache"),
        "QUOTECLIP_REDIS_URL": redis_url,
        "QUOTECLIP_SITE_KEYS": "site:site-secret-0123456789",
    }
    signing = ("sign", url, "--start", "1", "--end", "2", "--site", "site", "--check")
    refused = run_cli(*signing, env=env)
    assert refused.returncode == 2 and "QUOTECLIP_ALLOW_LOOPBACK=true" in refused.stderr, refused.stderr
    env["QUOTECLIP_ALLOW_LOOPBACK"] = "true"
    signed = run_cli(*signing, env=env)
    assert signed.returncode == 0 and "/l/site/" in signed.stdout, signed.stderr
    queued = run_cli("enqueue", url, "--start", "1", "--end", "2", "--json", env=env)
    assert queued.returncode == 0, queued.stderr
    rendered = run_cli("render", url, "--start", "1", "--end", "2", "--json", env=env)
    assert rendered.returncode == 0, rendered.stderr


def _options(help_text: str) -> list[str]:
    return sorted(set(re.findall(r"--[a-z][a-z-]+", help_text)))


@pytest.mark.slow
def test_worker_script_is_the_worker_command(tmp_path) -> None:
    """``python worker.py`` is ``quoteclip worker``: the same options (``--clicks-only`` too), and bad settings
    reported as the CLI does (no traceback)."""
    import subprocess
    import sys

    script = str(Path(__file__).resolve().parent.parent / "worker.py")
    shown = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=60)
    command = run_cli("worker", "--help")
    assert shown.returncode == 0 and command.returncode == 0
    assert _options(shown.stdout) == _options(command.stdout)
    assert {"--burst", "--clicks-only", "--webhooks", "--name"} <= set(_options(shown.stdout))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("QUOTECLIP_")}, "QUOTECLIP_LINK_TTL": "soon"}
    bad = subprocess.run([sys.executable, script, "--burst"], capture_output=True, text=True, env=env, timeout=60)
    assert (
        bad.returncode == 2
        and bad.stderr.strip() == "quoteclip: bad input: QUOTECLIP_LINK_TTL must be a number, got 'soon'"
    )
    both = subprocess.run([sys.executable, script, "--webhooks", "--clicks-only"], capture_output=True, text=True)
    assert both.returncode == 2 and "choose one" in both.stderr


def test_every_clip_command_has_every_clip_option() -> None:
    """The clip options are declared once: render and enqueue take all of them, batch all but the per-quote ones
    (its file gives start, end and caption), and each becomes one ClipOptions field."""
    from dataclasses import fields

    from cli.options import CLIP_OPTIONS, PER_QUOTE, ClipOptions

    names = {name for name, _, _ in CLIP_OPTIONS}
    assert {f.name for f in fields(ClipOptions)} == names | {"source"}
    flags = {"--" + name.replace("_", "-") for name in names}
    for command, expected in (
        ("render", flags),
        ("enqueue", flags),
        ("batch", flags - {"--start", "--end", "--caption"}),
    ):
        shown = run_cli(command, "--help", env={"COLUMNS": "200"})
        assert shown.returncode == 0, shown.stderr
        assert expected <= set(_options(shown.stdout)), command
    assert PER_QUOTE == {"start", "end", "caption"}


IMPORT_PROBE = """
import json, sys
from cli.app import app, load_commands  # (main() would end the process at once: ONE_SHOT)
sys.argv = ["quoteclip", *sys.argv[1:]]
load_commands(sys.argv[1:])
try:
    app()
except SystemExit:
    pass
heavy = ["av", "PIL", "numpy", "urllib3", "boto3", "yt_dlp", "fastapi", "rq", "redis", "fontTools", "ffmpeg",
         "renderer.render", "sources.http", "uvicorn", "cli.service", "cli.queue",
         "cli.align"]
print(json.dumps(sorted(m for m in heavy if m in sys.modules)), file=sys.stderr)
"""


@pytest.mark.slow
def test_render_loads_only_what_the_call_needs(media, tmp_path) -> None:
    """Start-up is most of a call that finds its clip stored: it loads no media library, HTTP client, S3 SDK,
    queue or web framework; a local render loads the media libraries but no HTTP client, S3 SDK or queue."""
    import subprocess
    import sys

    src = media(size="320x180", duration=4, gop=60)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("QUOTECLIP_")},
        "QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"),
    }
    args = ["render", str(src), "--start", "1", "--end", "2", "--caption", "plain latin text", "--json"]

    def loaded() -> tuple[dict[str, object], list[str]]:
        done = subprocess.run(
            [sys.executable, "-c", IMPORT_PROBE, *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout), json.loads(done.stderr.strip().splitlines()[-1])

    rendered, modules = loaded()
    assert rendered["cached"] is False
    assert set(modules) >= {"av", "PIL", "renderer.render"}  # the probe works: it sees what a render loads
    assert not set(modules) & {"urllib3", "boto3", "yt_dlp", "fastapi", "rq", "redis", "numpy", "fontTools"}
    # only the render command's own module: not the service, queue or align commands' (nor uvicorn)
    assert not set(modules) & {"uvicorn", "cli.service", "cli.queue", "cli.align"}
    stored, modules = loaded()
    assert stored["cached"] is True
    assert modules == []


# A cold render as the console script runs it (cli.launch), with a finder that says on stderr when the
# command's own process (not a child it forked) imports PyAV. ``start=0``: the probe helper is not started;
# ``start=fork-fails``: it cannot be (no process may be forked).
LAUNCH_WATCH = """
import os, sys
parent = os.getpid()

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "av" and os.getpid() == parent:
            sys.stderr.write("PARENT IMPORTED av\\n")
        return None

sys.meta_path.insert(0, Watch())
if sys.argv[1] == "start=0":
    from renderer import prober
    prober.start = lambda: False
if sys.argv[1] == "start=fork-fails":
    def refuse():
        raise BlockingIOError(11, "Resource temporarily unavailable")
    os.fork = refuse
sys.argv = ["quoteclip", *sys.argv[2:]]
from cli.launch import main
main()
"""


@pytest.mark.slow
def test_cold_render_probes_in_a_helper_process(media, tmp_path) -> None:
    """``quoteclip render`` forks a helper as it starts, which imports PyAV and probes the source and the clip
    while the command imports the rest: the command's own process never imports PyAV, and the clip is the one a
    render without the helper makes. Where no process may be forked, the command renders without one."""
    import subprocess
    import sys

    src = media(size="320x180", duration=4, gop=60)
    args = ["render", str(src), "--start", "1", "--end", "2", "--caption", "plain latin text", "--json"]

    def render(start: str, store: str) -> tuple[dict[str, object], str]:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("QUOTECLIP_")},
            "QUOTECLIP_STORAGE_DIR": str(tmp_path / store),
        }
        done = subprocess.run(
            [sys.executable, "-c", LAUNCH_WATCH, f"start={start}", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout), done.stderr

    helped, said = render("1", "a")
    alone, said_alone = render("0", "b")
    assert "PARENT IMPORTED av" in said_alone  # the watch sees a render that probes in its own process
    assert "PARENT IMPORTED av" not in said
    assert helped["cached"] is False and helped["key"] == alone["key"]
    assert_same_encode(Path(str(helped["path"])), Path(str(alone["path"])))
    refused, said_refused = render("fork-fails", "c")  # no helper: the render probes for itself
    assert refused["key"] == alone["key"] and "PARENT IMPORTED av" in said_refused


PROBER_CHECK = """
import json, os, signal, sys
from dataclasses import asdict
from renderer import prober
prober.start()
from quoteclip.errors import QuoteclipError
from renderer.probe import probe

def attempt(path, **kw):
    try:
        return {"info": asdict(probe(path, **kw))}
    except QuoteclipError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}

def every():
    return [attempt(p, first_frame=f, max_pixels=m) for p in sys.argv[1:] for f in (False, True) for m in (None, 100)]

helped = every()
av_imported = "av" in sys.modules
os.kill(prober._helper.pid, signal.SIGKILL)
print(json.dumps({"helped": helped, "av_imported": av_imported, "after_kill": every(), "gone": prober._helper is None}))
"""


def test_probe_helper_answers_as_the_probe_does(media, tmp_path) -> None:
    """The helper's answers are the in-process probe's, errors included (not media, missing, over the frame size
    cap, a rotated picture); once it is killed, the process probes for itself and says the same."""
    import subprocess
    import sys
    from dataclasses import asdict

    from quoteclip.errors import QuoteclipError
    from renderer.probe import probe

    text = tmp_path / "notes.mp4"
    text.write_text("not a video")
    paths = [
        str(media(size="320x180", duration=2, gop=30)),
        str(media(size="320x240", duration=2, rotation=90)),
        str(text),
        str(tmp_path / "missing.mp4"),
    ]

    def attempt(path: str, **kw: object) -> dict[str, object]:
        try:
            return {"info": asdict(probe(path, **kw))}  # type: ignore[arg-type]
        except QuoteclipError as exc:
            return {"error": type(exc).__name__, "message": str(exc)}

    here = [attempt(p, first_frame=f, max_pixels=m) for p in paths for f in (False, True) for m in (None, 100)]
    assert {"error": "BadInput", "message": f"source is not a readable video file: {text}"} in here
    assert any(a.get("info", {}).get("rotation") for a in here)  # type: ignore[union-attr]
    done = subprocess.run([sys.executable, "-c", PROBER_CHECK, *paths], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    there = json.loads(done.stdout)
    assert there["helped"] == here
    assert there["av_imported"] is False
    assert there["after_kill"] == here and there["gone"] is True


@pytest.mark.slow
def test_a_caption_too_fast_to_read_is_rendered_with_a_warning(media, tmp_path) -> None:
    """1,000 characters on a 4 s quote are rendered, but the answer says they are 250 characters a second."""
    src = media(size="320x180", duration=6, gop=60)
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path)}
    args = ["render", str(src), "--start", "1", "--end", "5", "--quality", "instant", "--json"]
    fast = run_cli(*args, "--caption", "word " * 200, env=env)
    assert fast.returncode == 0, fast.stderr
    (warning,) = json.loads(fast.stdout)["warnings"]
    assert "999 characters in 4.000 s is 250 characters a second" in warning and warning in fast.stderr
    calm = run_cli(*args, "--caption", "a quote people can read", env=env)
    assert json.loads(calm.stdout)["warnings"] == [] and "warning" not in calm.stderr
