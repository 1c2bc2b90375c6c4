"""A probe helper for a cold ``quoteclip render``: a child process forked as the command starts imports PyAV and
probes the local files the render asks about, while the command itself imports the rest on the other core.

PyAV is about a fifth of what a cold render imports, so a one-shot command's answer comes that much sooner, and
the probe's own reads no longer contend with the overlays' drawing for the interpreter. The helper is a hint, never
a dependency: a probe it cannot answer (it died, it met something other than the errors a probe raises, the source
is not a local path) is made in the command's own process, as it is in a worker, and gives the same answer.

Only ``cli.launch`` starts it, before any thread exists; nothing else forks it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import asdict, dataclass
from typing import IO, Any, NoReturn

from quoteclip import errors

from . import probe as probing
from .probe import MediaInfo


@dataclass
class _Helper:
    pid: int
    requests: IO[bytes]
    answers: IO[bytes]
    lock: threading.Lock


_helper: _Helper | None = None


def start() -> bool:
    """Fork the helper (once per process). False where it cannot be (no fork, a process or descriptor limit): the
    command then probes for itself."""
    global _helper
    if _helper is not None:
        return True
    if not hasattr(os, "fork"):
        return False
    fds: list[int] = []
    try:
        fds += os.pipe()
        fds += os.pipe()
        pid = os.fork()
    except OSError:  # no descriptors left, or no process may be started here (a limit, a sandbox)
        for fd in fds:
            os.close(fd)
        return False
    ask_r, ask_w, say_r, say_w = fds
    if pid == 0:  # the helper
        os.close(ask_w)
        os.close(say_r)
        _serve(ask_r, say_w)
    os.close(ask_r)
    os.close(say_w)
    _helper = _Helper(pid, os.fdopen(ask_w, "wb", buffering=0), os.fdopen(say_r, "rb"), threading.Lock())
    probing.helper = ask
    return True


def stop() -> None:
    """End the helper and reap it. (Left running, it ends by itself with the command's process: its requests pipe
    closes.)"""
    global _helper
    helper, _helper = _helper, None
    if helper is None:
        return
    probing.helper = None
    for pipe in (helper.requests, helper.answers):
        try:
            pipe.close()
        except OSError:
            pass
    try:
        os.kill(helper.pid, signal.SIGKILL)
        os.waitpid(helper.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def ask(source: str, name: str | None, max_pixels: int | None, first_frame: bool) -> MediaInfo | None:
    """The helper's probe of the local file ``source``: its MediaInfo, or the probe's own error raised here; None
    when there is no helper or it gave no answer (the caller then probes in its own process)."""
    helper = _helper
    if helper is None:
        return None
    request = {"source": source, "name": name, "max_pixels": max_pixels, "first_frame": first_frame}
    with helper.lock:
        try:
            helper.requests.write(json.dumps(request).encode() + b"\n")
            line = helper.answers.readline()
        except (OSError, ValueError):  # it died (a closed pipe), or was stopped meanwhile
            line = b""
    try:
        answer = json.loads(line)
    except ValueError:  # nothing (it died) or a broken line: it is not asked again
        stop()
        return None
    if "info" in answer:
        return MediaInfo(**answer["info"])
    error = getattr(errors, str(answer.get("error")), None)
    if isinstance(error, type) and issubclass(error, errors.QuoteclipError):
        raise error(answer["message"])
    return None


def _serve(requests_fd: int, answers_fd: int) -> NoReturn:
    """The helper's life: one JSON request per line, one JSON answer per line, until the requests end."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it with the command, silently
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):  # the command's stdin and stdout are the command's alone
            os.dup2(devnull, fd)
        import av  # noqa: F401  (imported now, while the command imports the rest, not at the first request)

        with os.fdopen(requests_fd, "rb") as requests, os.fdopen(answers_fd, "wb", buffering=0) as answers:
            for line in requests:
                answers.write(json.dumps(_answer(json.loads(line))).encode() + b"\n")
    except BaseException:  # noqa: BLE001  (the command probes for itself from then on)
        code = 1
    os._exit(code)


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    try:
        source, name, max_pixels, first_frame = (request[k] for k in ("source", "name", "max_pixels", "first_frame"))
        info = probing.probe(source, name=name, max_pixels=max_pixels, first_frame=first_frame)
    except errors.QuoteclipError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    except Exception:  # noqa: BLE001  (not a probe's answer: the command's own probe will say what it is)
        return {}
    return {"info": asdict(info)}
