"""The files stored next to a clip: its captions (SRT, WebVTT), a poster and a manifest of what was cut."""

from __future__ import annotations

import hashlib

from quoteclip import RENDERER_VERSION, __version__
from quoteclip.spec import ClipSpec
from renderer.ffmpeg import ffmpeg_version
from renderer.frames import FrameSpan
from renderer.render import RenderResult, poster_time
from renderer.sidecars import burned_caption, manifest, poster, sha256_file, to_srt, to_vtt


def sidecar_files(
    spec: ClipSpec,
    key: str,
    identity: str,
    title: str | None,
    result: RenderResult,
    ffmpeg_bin: str,
    frames: FrameSpan,
    preview: dict[str, str] | None = None,
    source_format: str | None = None,
) -> dict[str, tuple[bytes, str]]:
    """SRT and WebVTT of the captions (clip time), a poster JPEG (not for an instant preview: the page shows the
    video itself) and a JSON manifest (with the caption as burned), by file suffix."""
    files: dict[str, tuple[bytes, str]] = {}
    if result.captions is not None:
        files[".srt"] = (to_srt(result.captions).encode(), "application/x-subrip")
        files[".vtt"] = (to_vtt(result.captions).encode(), "text/vtt")
    if spec.quality != "instant":
        at = poster_time(result.duration)
        still = result.poster.read_bytes() if result.poster is not None else poster(result.path, at)
        files[".jpg"] = (still, "image/jpeg")
    # a clip with its pauses tightened: the source spans it holds, one after another (its end: the last one's)
    kept = result.kept.source_spans() if result.kept is not None else None
    end = kept[-1]["end"] if kept else round(result.source_start + result.duration, 3)
    files[".manifest.json"] = (
        manifest(
            key=key,
            # "format": the page's format family read (https, hls, dash), when it is a page
            source={"url": spec.source, "id": identity, "title": title}
            | ({"format": source_format} if source_format else {}),
            quote={"start": spec.start, "end": spec.end},
            # the caption as burned: the words the cut holds, in the pages shown (spec.caption is as asked)
            caption=burned_caption(result.captions),
            source_times={"start": result.source_start, "end": end},
            **({"kept": kept} if kept is not None else {}),
            frames=frames.to_json(),
            preview=preview,
            spec=spec.model_dump(mode="json"),
            versions={"quoteclip": __version__, "renderer": RENDERER_VERSION, "ffmpeg": ffmpeg_version(ffmpeg_bin)},
            output={
                "width": result.width,
                "height": result.height,
                "duration": result.duration,
                "bytes": result.path.stat().st_size,
                "sha256": sha256_file(result.path),
            },
            sidecars={
                suffix: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                for suffix, (data, _) in files.items()
            },
        ),
        "application/json",
    )
    return files
