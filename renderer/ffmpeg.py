"""Find ffmpeg and run it: one function, a timeout, progress, and nothing left behind."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import IO

from quoteclip.errors import MachineFault, RenderFailed
from quoteclip.machine import oom_kills

log = logging.getLogger(__name__)

STDERR_TAIL_CHARS = 2000


def ffmpeg_binary(override: str | None = None) -> str:
    """``FFMPEG_BINARY`` (passed in through Settings) or the static ffmpeg of the imageio-ffmpeg wheel."""
    if override:
        found = shutil.which(override)
        if not found:
            # this worker's set-up, not the request: another worker (or this one, mended) may render the clip
            raise MachineFault(f"FFMPEG_BINARY points at {override!r}, which is not an executable", "ffmpeg")
        return found
    return _bundled_ffmpeg()


@lru_cache(maxsize=1)
def _bundled_ffmpeg() -> str:
    """The wheel's own binary, found without running it: imageio-ffmpeg's lookup runs ``ffmpeg -version`` to
    check it (about 15 ms before every cold render could start; the manifest's version is asked once per binary:
    ``ffmpeg_version``).
    Where the wheel holds no binary, or ``IMAGEIO_FFMPEG_EXE`` names one, imageio-ffmpeg's own lookup decides."""
    import imageio_ffmpeg

    from quoteclip.settings import env_text

    folder = Path(imageio_ffmpeg.__file__).parent / "binaries"
    if not env_text("IMAGEIO_FFMPEG_EXE"):
        found = [p for p in folder.glob("ffmpeg*") if p.is_file() and os.access(p, os.X_OK)]
        if len(found) == 1:
            return str(found[0])
    return str(imageio_ffmpeg.get_ffmpeg_exe())


VERSIONS_FILE = "ffmpeg-versions.json"  # in the user's cache folder (quoteclip.settings.default_cache_dir)
VERSIONS_KEPT = 16


@lru_cache(maxsize=8)
def ffmpeg_version(binary: str) -> str:
    """ffmpeg's version for the manifest: asked of the binary once, then remembered on disk by the binary's path,
    size, inode and modification time (a replaced binary is asked again), so a cold render does not start a
    second ffmpeg beside its probe and overlays (about 10 ms of CPU on a 2-core machine, before the render)."""
    from quoteclip.settings import default_cache_dir

    store = default_cache_dir() / VERSIONS_FILE
    path = os.path.realpath(binary)
    try:
        st = os.stat(path)
        key = f"{path}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns}"
    except OSError:
        key = ""
    known = _read_versions(store)
    if key in known:
        return known[key]
    out = subprocess.run([binary, "-hide_banner", "-version"], capture_output=True, text=True, timeout=30)
    first = out.stdout.splitlines()[0] if out.stdout else ""
    version = first.removeprefix("ffmpeg version ").split(" ")[0]
    if key and version:
        known = {k: v for k, v in known.items() if not k.startswith(f"{path}:")}  # the binary's older builds
        _write_versions(store, dict(list({**known, key: version}.items())[-VERSIONS_KEPT:]))
    return version


def _read_versions(store: Path) -> dict[str, str]:
    try:
        data = json.loads(store.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _write_versions(store: Path, known: dict[str, str]) -> None:
    """Written whole and renamed into place (two processes at once: one of them wins); a folder that cannot be
    written to only means the next cold render asks again."""
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=store.parent, prefix=".versions-")
    except OSError as exc:
        log.debug("ffmpeg's version not remembered: %s", exc)
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(known, out)
        os.replace(tmp, store)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        log.debug("ffmpeg's version not remembered: %s", exc)


def run_ffmpeg(
    argv: list[str],
    timeout: float,
    on_progress: Callable[[float], None] | None = None,
) -> str:
    """Run one ffmpeg command to completion.

    ``argv`` must contain ``-progress pipe:1`` for progress reports; ``on_progress`` receives the output
    time in seconds, at most a few times a second. On failure or timeout the process group is killed and
    RenderFailed carries the command and the tail of stderr. Returns the tail of stderr (errors ffmpeg logged
    but went on after, such as frames its decoder refused)."""
    log.debug("ffmpeg: %s", subprocess.list2cmdline(argv))
    kills_before = oom_kills()  # (read before ffmpeg starts: a kill as it starts counts too)
    with tempfile.TemporaryFile(mode="w+b") as err:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                # its own process group (killed as one), but the worker's session: Linux's autogroup scheduling
                # then weighs it against the other workers' ffmpeg by niceness (a batch render's is 10 steps nicer)
                process_group=0,
                preexec_fn=die_with_parent(),
            )
        except OSError as exc:  # no binary there, not executable, not for this machine, or no memory to fork
            raise MachineFault(
                f"ffmpeg could not be started ({exc.strerror or type(exc).__name__})", _start_reason(exc.errno)
            ) from None
        reader = threading.Thread(target=_read_progress, args=(proc, on_progress), daemon=True)
        reader.start()
        # a blocking wait returns the moment ffmpeg exits (a wait with a timeout polls, up to 50 ms late);
        # the timer stops a render that runs too long
        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            _kill_group(proc)

        timer = threading.Timer(timeout, stop)
        timer.daemon = True
        timer.start()
        try:
            try:
                code = proc.wait()
            finally:
                timer.cancel()
            if timed_out.is_set():
                raise RenderFailed(f"ffmpeg took longer than {timeout:.0f} s and was stopped", argv, _tail(err))
            reader.join(timeout=5)
            if code != 0:
                said = _tail(err)
                machine = machine_reason(code, kills_before)
                if machine is not None:
                    log.info("ffmpeg failed on this machine (%s): %s", machine[1], said[-500:])
                    raise MachineFault(f"ffmpeg exited with code {code} ({machine[1]})", machine[0])
                if code == -signal.SIGKILL:  # killed from outside, with no sign it was for memory: tried again
                    raise RenderFailed("ffmpeg was killed by a signal it was not sent by quoteclip", argv, said, False)
                raise RenderFailed(f"ffmpeg exited with code {code}{_errno_hint(code)}", argv, said)
            return _tail(err)
        finally:
            if proc.poll() is None:
                _kill_group(proc)
            if proc.stdout:
                proc.stdout.close()


# Exit codes of a binary that could not run at all: 126 (found but not executable), 127 (not found, or a
# library it needs is missing: the dynamic loader's code).
BROKEN_BINARY_CODES = {126, 127}


def machine_reason(code: int, kills_before: int | None = None) -> tuple[str, str] | None:
    """Why an ffmpeg exit is this machine's fault, as (a MachineFault reason, the cause in words), or None when
    nothing this process can measure says so: a binary that could not run, or a SIGKILL that was not ours while
    the kernel's count of out-of-memory kills rose past ``kills_before`` (read when ffmpeg started; a timeout's
    kill is told apart before). Neither the exit code of a system error nor the words ffmpeg printed decide: an
    input can make ffmpeg exit with -ENOMEM (an expression too deep to parse) or print any text (a URL's path
    names "No space left on device"). A full disk or memory exhausted is measured after the failure, where the
    render's folders are known (jobs/pipeline/steps.py)."""
    if code in BROKEN_BINARY_CODES:
        return "ffmpeg", "the binary could not run"
    if code == -signal.SIGKILL:
        kills = oom_kills()
        if kills is not None and kills_before is not None and kills > kills_before:
            return "memory", "killed by the kernel, out of memory"
    return None


def _start_reason(value: int | None) -> str:
    return "memory" if value in (errno.ENOMEM, errno.EAGAIN) else "ffmpeg"


def _errno(code: int) -> int:
    """ffmpeg exits with a negated errno (mod 256) for system errors."""
    return 256 - code if 128 < code < 256 else 0


def _errno_hint(code: int) -> str:
    """Name the system error ffmpeg exited with ("No space left on device")."""
    errno_value = _errno(code)
    name = os.strerror(errno_value) if errno_value else ""
    return f" ({name})" if name and not name.startswith("Unknown error") else ""


@lru_cache(maxsize=1)
def die_with_parent() -> Callable[[], object] | None:
    """What the child runs before exec: on Linux, get SIGKILL when the process that started ffmpeg dies (a
    worker's work-horse killed mid-render must not leave ffmpeg running). ``prctl`` is looked up here, in the
    parent, once: a child that imported ctypes between fork and exec added about 3 ms to every ffmpeg start.
    Called ahead of the first run (the pipeline's set-up, a worker's preload) to take the lookup off the path."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no such call
        return None
    return partial(prctl, 1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _read_progress(proc: subprocess.Popen[bytes], on_progress: Callable[[float], None] | None) -> None:
    assert proc.stdout is not None
    last = 0.0
    for raw in proc.stdout:
        line = raw.decode("ascii", "replace").strip()
        if on_progress is None or not line.startswith("out_time_us="):
            continue
        try:
            seconds = int(line.split("=", 1)[1]) / 1e6
        except ValueError:
            continue  # "N/A" before the first frame
        now = time.monotonic()
        if now - last >= 0.25:
            last = now
            on_progress(max(0.0, seconds))


def _tail(err: IO[bytes]) -> str:
    err.seek(0, os.SEEK_END)
    err.seek(max(0, err.tell() - STDERR_TAIL_CHARS))
    return err.read().decode("utf-8", "replace").strip()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
