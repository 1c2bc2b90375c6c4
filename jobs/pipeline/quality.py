"""A clip's quality report in its manifest (renderer/qa.py): made once the clip is stored, from the rendered file
still on the worker's disk, then the manifest stored again with it under ``qa``. The link and the first byte never
wait for it: a viewer plays the clip while its report is made, and a manifest read before then has no ``qa`` yet.

A clip's report reads the clip once (one ffmpeg pass: black, frozen frames, silences, loudness and true peak) and
its cut against its words. A clip rendered in one pass had its picture read by the render itself (renderer/qa.py):
its report's pass reads back its sound alone (none without the source's sound), a small part of decoding the clip
again. A report that cannot be made (ffmpeg failing on the stored file) is logged and leaves the manifest as it was:
the clip stands whatever its report.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quoteclip.errors import QuoteclipError
from quoteclip.platforms import TRUE_PEAK
from quoteclip.spec import ClipSpec
from storage import Storage

if TYPE_CHECKING:
    from renderer.captions import CaptionTrack
    from renderer.qa import Seen

log = logging.getLogger(__name__)

MANIFEST = ".manifest.json"
# The longest clip whose report the API makes on demand (GET /clips/{id}/report, for a clip stored without one):
# its check decodes the whole clip in the API process. A longer one's report is its worker's, or none.
ON_DEMAND_SECONDS = 120.0


def clip_report(
    spec: ClipSpec,
    path: Path,
    binary: str,
    duration: float,
    sound: bool,
    captions: CaptionTrack | None = None,
    picture: Seen | None = None,
) -> dict[str, Any]:
    """The report of the clip ``path`` made for ``spec``: its findings and measures, and the seconds it took. The
    loudness is checked against the spec's target (a platform's, or the one asked) and the true-peak limit then;
    the cut's ends (the quote's, source time) against its words when it has them; the lines of the captions it
    burns (``captions``, the render's layout, else laid out again from the spec) against its frame. ``picture``:
    what the render's picture detectors saw (``RenderResult.picture_checks``), so only the sound is read back."""
    from renderer.qa import check

    if captions is None:
        captions = _laid_out(spec)

    began = time.perf_counter()
    report = check(
        str(path),
        binary,
        duration,
        sound,
        spec.words or (),
        (spec.cut_start, spec.cut_end),  # the clip's own ends: the quote's, or its padding's
        spec.loudness,
        TRUE_PEAK if spec.loudness is not None else None,
        captions=captions,
        picture=picture,
    )
    return {**report.to_json(), "checked_s": round(time.perf_counter() - began, 3)}


def _laid_out(spec: ClipSpec) -> CaptionTrack | None:
    """The captions ``spec``'s clip burns, laid out again (an instant clip burns none); None when they cannot be
    (its font not on this machine)."""
    from renderer.render import caption_layout, cut_for

    if spec.quality == "instant":
        return None
    try:
        return caption_layout(spec, cut_for(spec, None))
    except Exception as exc:  # noqa: BLE001  (the rest of the report stands without it)
        log.info("captions not laid out for the report: %s", f"{exc}".splitlines()[0] if f"{exc}" else exc)
        return None


def with_report(manifest: bytes, report: dict[str, Any]) -> bytes:
    """A stored manifest's bytes with ``report`` as its ``qa``, written as the manifest is."""
    from renderer.sidecars import manifest as written

    return written(**{**json.loads(manifest), "qa": report})


def report_into(storage: Storage, key: str, manifest: bytes, report: dict[str, Any]) -> None:
    """Store the clip's manifest again, now with its report."""
    storage.put_sidecar(key, MANIFEST, with_report(manifest, report), "application/json")


def checked(
    storage: Storage,
    key: str,
    manifest: bytes,
    spec: ClipSpec,
    path: Path,
    binary: str,
    duration: float,
    sound: bool,
    captions: CaptionTrack | None = None,
    picture: Seen | None = None,
) -> dict[str, Any] | None:
    """Make the report of a clip just stored (its file ``path``; ``picture``: what its render's picture detectors
    saw) and store it in its manifest; None (logged) when it could not be made."""
    try:
        report = clip_report(spec, path, binary, duration, sound, captions, picture)
        report_into(storage, key, manifest, report)
    except Exception as exc:  # (the clip is stored: a report that fails is said, never raised)
        timeouts = sys.modules.get("rq.timeouts")  # (loaded in a queued job only: the CLI loads no rq)
        if timeouts is not None and isinstance(exc, timeouts.JobTimeoutException):
            raise  # the job's time is up: its worker ends it
        log.warning("no quality report for clip %s: %s", key, f"{exc}".splitlines()[0] if f"{exc}" else exc)
        return None
    found = ", ".join(f["kind"] for f in report["findings"]) or "nothing found"
    log.info("quality report of clip %s: %s (%.2f s)", key, found, report["checked_s"], extra={"fields": {"key": key}})
    return report


def stored_report(storage: Storage, key: str, binary: str) -> dict[str, Any] | None:
    """A stored clip's report: its manifest's, or made now from the stored clip (and kept in its manifest). None
    when the clip or its manifest is not stored."""
    from renderer.probe import probe

    manifest = storage.get_sidecar(key, MANIFEST)
    if manifest is None or storage.stat(key) is None:
        return None
    try:
        fields = json.loads(manifest)
        if isinstance(fields.get("qa"), dict):
            return dict(fields["qa"])
        spec = ClipSpec.model_validate(fields["spec"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # (ValidationError is a ValueError)
        log.warning("clip %s's manifest cannot be read for its report: %s", key, f"{exc}".splitlines()[0])
        return None
    if spec.duration > ON_DEMAND_SECONDS:
        return None
    with tempfile.TemporaryDirectory(prefix="quoteclip-qa-") as tmp:
        path = storage.local_path(key)
        if path is None:
            path = Path(tmp) / "clip.mp4"
            with storage.read(key) as body, open(path, "wb") as out:
                for chunk in iter(lambda: body.read(1 << 20), b""):
                    out.write(chunk)
        try:
            info = probe(str(path))
        except QuoteclipError as exc:
            log.warning("clip %s cannot be read for its report: %s", key, f"{exc}".splitlines()[0])
            return None
        return checked(storage, key, manifest, spec, path, binary, info.duration, info.has_audio)
