"""What a clip job answers: the stored clip's link, size, duration and sidecar links."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from storage import Storage

from .stages import Stage


@dataclass(frozen=True)
class ClipResult:
    status: str
    link: str
    key: str
    width: int
    height: int
    duration: float
    cached: bool
    path: str | None = None
    filename: str | None = None
    source_bytes: int | None = None  # bytes fetched from a remote source for this render
    sidecars: dict[str, str] | None = None  # srt, vtt, poster, manifest → links
    frames: dict[str, object] | None = None  # the source frames the clip holds: rate, first and last (index, time)
    preview: dict[str, str] | None = None  # instant previews: {"mode": "copy"} or {"mode": "encoded", "reason": …}
    timings: dict[str, float] | None = None  # seconds per step of this render (logs, job meta); not in the JSON

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if (v is not None or k == "path") and k != "timings"}


@dataclass(frozen=True)
class PosterStored:
    """A clip's stored poster (its own, or one rendered alone): where it is, and whether it was there already."""

    key: str
    link: str
    cached: bool
    timings: dict[str, float] | None = None  # seconds per step of this render (logs, job meta); not in the JSON

    def to_json(self) -> dict[str, object]:
        return {"status": Stage.FINISHED.value, "key": self.key, "poster": self.link, "cached": self.cached}


def stored_result(storage: Storage, key: str, meta: dict[str, str], cached: bool) -> ClipResult:
    path = storage.local_path(key)
    names = {".srt": "srt", ".vtt": "vtt", ".jpg": "poster", ".manifest.json": "manifest"}
    suffixes = [x for x in meta.get("sidecars", "").split(",") if x in names]
    return ClipResult(
        status=Stage.FINISHED.value,
        link=storage.link(key),
        key=key,
        width=int(meta.get("width", 0)),
        height=int(meta.get("height", 0)),
        duration=float(meta.get("duration", 0)),
        cached=cached,
        path=str(path) if path is not None else None,
        filename=meta.get("filename"),
        sidecars={names[x]: storage.link(key, x) for x in suffixes} or None,
        frames=_json(meta.get("frames")),
        preview=_json(meta.get("preview")),
    )


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None
