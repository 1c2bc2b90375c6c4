"""One small error hierarchy. What a failed job does next is a property of its error's class: a ``permanent``
error fails the job at once; a transient one is retried (an attempt spent); a ``machine`` fault (this worker's
disk is full, its memory exhausted, its ffmpeg missing or broken) hands the job back to the queue for another
worker without spending an attempt."""

from __future__ import annotations

import errno
import os


class QuoteclipError(Exception):
    """Base class. A clip job that fails with a ``permanent`` error is not retried; the others may succeed on a
    later try (the queue retries them with backoff)."""

    permanent: bool = True
    machine: bool = False  # the fault is this machine's, not the request's: another worker may run the job
    kind: str = "error"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else self.kind


class BadInput(QuoteclipError):
    """The request itself is wrong (a field, a time, a file that is not media)."""

    kind = "bad input"


class SourceRefused(BadInput):
    """The source is not allowed: a host off the allowlist, a private address, a scheme other than http(s)."""

    kind = "source refused"


class SourceUnavailable(QuoteclipError):
    """The source cannot be read (missing file, HTTP 404 or 403, over a limit). Refused hosts and addresses are
    SourceRefused."""

    kind = "source unavailable"


class SourceTransient(SourceUnavailable):
    """The source failed in a way that may pass (timeout, HTTP 5xx)."""

    permanent = False


class SourceBotCheck(SourceTransient):
    """The site asked for proof this is not a bot (YouTube: "Sign in to confirm you're not a bot"), as it does to
    data-centre addresses. Retried with backoff; the operator's cure is cookies, a PO token or a proxy."""

    kind = "bot check"


class SourceThrottled(SourceTransient):
    """The site answered "too many requests" (HTTP 429): retried with backoff."""

    kind = "throttled"


class SourceLinkExpired(SourceTransient):
    """A page's media link was refused (HTTP 403/410) and so was the link of a fresh extraction: retried later,
    when the site may sign a working one."""

    kind = "expired link"


class SourceLoginRequired(SourceUnavailable):
    """The video needs a signed-in viewer (age gate, members only): only the operator's cookies can help."""

    kind = "login required"


class SourceGeoBlocked(SourceUnavailable):
    """The site does not offer the video in the country the request comes from (a proxy elsewhere can help)."""

    kind = "geo-blocked"


class SourceGone(SourceUnavailable):
    """The video is private, removed or its account closed."""

    kind = "private or removed"


class RenderFailed(QuoteclipError):
    """ffmpeg failed or timed out. Carries the command and the tail of its stderr.

    Permanent by default (the same input fails the same way). A failure of this machine (a full disk, no
    memory, no working ffmpeg) is a MachineFault instead.
    """

    kind = "render failed"
    permanent = True

    def __init__(
        self, message: str, argv: list[str] | None = None, stderr_tail: str = "", permanent: bool = True
    ) -> None:
        super().__init__(message)
        self.argv = argv or []
        self.stderr_tail = stderr_tail
        self.permanent = permanent

    def __str__(self) -> str:
        text = str(self.args[0])
        if self.stderr_tail:
            text += "\nffmpeg said:\n" + self.stderr_tail
        return text


class DeliveryFailed(QuoteclipError):
    """A webhook receiver did not answer 2xx (or could not be reached); deliveries are retried."""

    kind = "webhook failed"
    permanent = False


class StorageFailed(QuoteclipError):
    """The object store refused or failed an operation; usually worth a retry."""

    kind = "storage failed"
    permanent = False


# What a machine fault is about (its ``reason``): the label of the worker's health and of its metrics.
MACHINE_REASONS = ("disk", "memory", "ffmpeg", "files")


# System errors of this machine, not of the input, by what they are about (MachineFault's reasons): a full disk
# or quota, no memory, no file handles. Another worker (or this one, once space is freed) may render the clip.
MACHINE_ERRNOS = {
    errno.ENOSPC: "disk",
    errno.EDQUOT: "disk",
    errno.ENOMEM: "memory",
    errno.EMFILE: "files",
    errno.ENFILE: "files",
}


class MachineFault(QuoteclipError):
    """The machine running the job failed it, not the request: its disk (temp or cache folder) is full, its
    memory is exhausted, its ffmpeg is missing or broken, it is out of file handles. A worker hands the job back
    to the queue for another worker (no attempt spent) and takes no job until it is healthy again. ``reason`` is
    one of MACHINE_REASONS."""

    kind = "machine fault"
    permanent = False
    machine = True

    def __init__(self, message: str, reason: str = "disk") -> None:
        super().__init__(message)
        if reason not in MACHINE_REASONS:
            raise ValueError(f"reason must be one of {', '.join(MACHINE_REASONS)}, got {reason!r}")
        self.reason = reason


class InternalError(QuoteclipError):
    """An error the code did not expect (a library's OSError on a font it cannot load, an OverflowError): not
    retried, since the same job meets it again; its message names the error's type, never a path of the
    server, and the worker's log holds the traceback."""

    kind = "internal error"
    permanent = True


_MACHINE_WORDS = {
    "disk": "the render's temp folder failed",
    "memory": "the worker ran out of memory",
    "files": "the worker ran out of file handles",
}


def machine_fault(exc: BaseException) -> MachineFault | None:
    """The MachineFault an error stands for, or None when nothing in it is evidence of this machine's fault:
    MemoryError, or an OSError raised by this process's own file, memory or handle operations with a system
    error of the machine's (MACHINE_ERRNOS: no space, no memory, no file handles), found on the error itself or
    on the ones it was raised from or during (``source could not be read ([Errno 28] No space left on device)``
    raised ``from None`` in an ``except OSError``: the OSError is its context). An error's text never decides:
    it can carry a URL, a page's reason phrase or ffmpeg's words, which a request controls."""
    if isinstance(exc, MachineFault):
        return exc
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:  # the error, and the ones it was raised from or during
        seen.add(id(cause))
        if isinstance(cause, MemoryError):
            return MachineFault("the worker ran out of memory", "memory")
        if isinstance(cause, OSError) and cause.errno in MACHINE_ERRNOS:
            what, reason = os.strerror(cause.errno), MACHINE_ERRNOS[cause.errno]
            said = f"{exc}".splitlines()[0] if isinstance(exc, QuoteclipError) else f"{_MACHINE_WORDS[reason]}: {what}"
            return MachineFault(said if what in said else f"{said} ({what})", reason)
        cause = cause.__cause__ or cause.__context__
    return None
