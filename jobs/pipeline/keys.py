"""Content addressing: a clip's key is a hash of everything that changes its pixels."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Callable

from quoteclip import RENDERER_VERSION
from quoteclip.spec import DEFAULT_ENCODER_PRESET, ClipSpec


def clip_key(
    spec: ClipSpec,
    source_identity: str,
    asset_identity: Callable[[str | None], str | None],
    secret: str | None = None,
) -> str:
    """32 hex characters of SHA-256 over the source identity, the spec's render fields (brand files by what they
    are: ``asset_identity``) and the renderer version; an HMAC with ``secret`` (``QUOTECLIP_KEY_SECRET``) when
    the operator wants keys, and so public clip URLs, that no one can compute from a guessed request."""
    fields = spec.model_dump(exclude={"source"})
    fields["font"] = asset_identity(spec.font)
    if spec.background is None:  # (a field added later: clips without it keep their keys)
        del fields["background"]
    elif not spec.background.startswith("#"):
        fields["background"] = asset_identity(spec.background)
    if spec.encoder_preset in (None, DEFAULT_ENCODER_PRESET):  # (likewise: the product's preset, named or not)
        del fields["encoder_preset"]
    if spec.watermark is not None and spec.watermark.logo is not None:
        fields["watermark"]["logo"] = asset_identity(spec.watermark.logo)
    payload = {"renderer": RENDERER_VERSION, "source": source_identity, "spec": fields}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if secret:
        return hmac.new(secret.encode(), blob.encode(), hashlib.sha256).hexdigest()[:32]
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def download_name(spec: ClipSpec, key: str) -> str:
    """A safe file name for the download: ASCII words of the caption, the start, the shape, part of the key (one
    quote's clips in several shapes are told apart by name)."""
    text = unicodedata.normalize("NFKD", spec.caption).encode("ascii", "ignore").decode()
    words = re.findall(r"[A-Za-z0-9]+", text)[:6]
    stem = "-".join(words).lower()[:48] or "clip"
    return f"{stem}-{int(spec.start)}s-{spec.profile}-{key[:8]}.mp4"
