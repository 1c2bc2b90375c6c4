"""A link's clip as the fields of ``POST /clips``: what verifying a link and revoking its clip both name."""

from __future__ import annotations

from typing import Any

from quoteclip.settings import SiteKey


def link_fields(clip: dict[str, Any], site: SiteKey) -> dict[str, Any]:
    """A link's clip as the fields of ``POST /clips`` (so both name one clip), with the key's brand as its watermark
    whatever the link names."""
    data: dict[str, Any] = {name: clip[name] for name in ("source", "start", "end", "caption") if name in clip}
    data.update({name: clip[name] for name in ("profile", "fit", "quality") if name in clip})
    if "style" in clip:
        data["style"] = {"preset": clip["style"]}
    if site.brand is not None:
        data["watermark"] = site.brand.model_dump(exclude_defaults=True)
    elif "watermark" in clip:
        data["watermark"] = {"text": clip["watermark"]}
    elif "logo" in clip:
        data["watermark"] = {"logo": clip["logo"]}
    return data
