"""Find a stored clip by its key: the light half of the pipeline (no media library, no HTTP client), so a
call that finds its clip already stored costs little more than the interpreter's start-up."""

from __future__ import annotations

from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec
from sources import SourceRef, resolve_source
from storage import Storage

from .assets import identities
from .keys import clip_key
from .results import ClipResult, stored_result


def lookup(spec: ClipSpec, settings: Settings, storage: Storage) -> tuple[str, ClipResult | None]:
    """The clip's key, and its result when it is already stored (no probe, no ffmpeg)."""
    _, key, found = find(spec, settings, storage)
    return key, found


def find(spec: ClipSpec, settings: Settings, storage: Storage) -> tuple[SourceRef, str, ClipResult | None]:
    source = resolve_source(spec.source, allow_local=settings.allow_local_sources is True)
    key = clip_key(spec, source.identity, identities(settings), settings.key_secret)
    meta = storage.stat(key)
    return source, key, stored_result(storage, key, meta, cached=True) if meta is not None else None


def find_poster(spec: ClipSpec, settings: Settings, storage: Storage) -> tuple[str, bool]:
    """The clip's key, and whether its poster is stored: the clip's own, or one rendered alone."""
    _, key, found = find(spec, settings, storage)
    return key, found is not None or sidecar_stored(storage, key, POSTER)


POSTER = ".jpg"  # the poster's suffix beside its clip (the clip's own, or one rendered alone)


def sidecar_stored(storage: Storage, key: str, suffix: str) -> bool:
    """Whether a file that goes with the clip ``key`` is stored, the clip or not (a poster rendered alone has no
    mp4 beside it)."""
    return storage.has_sidecar(key, suffix)
