"""Signed clip links: the canonical form of a clip a link names, and its signature.

A website signs a link with its site key (an id and a secret the operator gave it) without asking the service
anything, puts it in an ``<a href>``, a ``<video src>`` or a ``<video poster>``, and the service renders the clip
on the first request. This module is the whole of the signing: it uses the standard library only and imports
nothing else of quoteclip, so a site's backend can copy it or import it on its own (``docs/websites.md`` has the
same signer in JavaScript, and the tests check that both make the same links byte for byte).

A link is ``{base}/l/{key id}/{payload}.{signature}.{extension}``:

- ``payload``: base64url (no padding) of the canonical JSON of the clip: the fields below under their short
  names, times in integer milliseconds, defaults left out, keys sorted, no spaces, UTF-8. ``18:54`` and
  ``1134`` make one link; so do ``" a caption "`` and ``"a caption"``.
- ``signature``: the first 16 bytes of HMAC-SHA256(secret, ``"quoteclip-link-1:{key id}:{payload}"``),
  base64url without padding.
- ``extension``: ``mp4`` for the clip and its download, ``jpg`` for the poster, ``vtt`` for the captions.

What a link carries (short name: meaning, default):

====  ==========  ============================================================================
s     source      the video: a page URL (YouTube, any yt-dlp site) or a media URL
a     start       the quote's start, ms
b     end         the quote's end, ms
c     caption     the quote's text ("")
w     watermark   a text mark, e.g. a brand name (none; a key bound to a brand forces its own)
l     logo        a logo asset: ``asset:<sha256>.png`` or ``brand:NAME`` (none)
p     profile     landscape | vertical | square | portrait (landscape)
f     fit         pad | blur | center | speaker (pad)
y     style       the caption preset: clean | bold-outline | boxed | karaoke (boxed)
q     quality     final | preview (final)
v     variant     clip | download | poster | captions (clip)
x     expires     unix seconds, rounded up (a key with a link lifetime asks for one; none otherwise)
====  ==========  ============================================================================

Every number is bounded: ``start`` and ``end`` at most 24 hours (``MAX_MS``), ``expires`` at most ten years after
the moment it is signed or verified (``MAX_LIFETIME``). A link outside them is refused when signed (LinkError,
naming the field) and when verified (a 403, as any link that is not ours).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any

VERSION = "quoteclip-link-1"
PREFIX = "/l/"
SIGNATURE_BYTES = 16
MAX_PAYLOAD = 4096  # characters of base64url: a 1,000-character caption fits
KEY_ID = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
MAX_SECONDS = 24 * 3600  # the latest start or end a link names: 24 hours
MAX_MS = MAX_SECONDS * 1000
MAX_LIFETIME = 10 * 365 * 24 * 3600  # the latest expiry: ten years after now (when signed, when verified)

VARIANTS = {"clip": "mp4", "download": "mp4", "poster": "jpg", "captions": "vtt"}
# field → (short name, default): what a link carries, in the order a spec names them
FIELDS: dict[str, tuple[str, object]] = {
    "source": ("s", None),
    "start": ("a", None),
    "end": ("b", None),
    "caption": ("c", ""),
    "watermark": ("w", None),
    "logo": ("l", None),
    "profile": ("p", "landscape"),
    "fit": ("f", "pad"),
    "style": ("y", "boxed"),
    "quality": ("q", "final"),
    "variant": ("v", "clip"),
    "expires": ("x", None),
}
CHOICES = {
    "profile": ("landscape", "vertical", "square", "portrait"),
    "fit": ("pad", "blur", "center", "speaker"),
    "style": ("clean", "bold-outline", "boxed", "karaoke"),
    "quality": ("final", "preview"),
    "variant": tuple(VARIANTS),
}
SHORT = {short: name for name, (short, _) in FIELDS.items()}


class LinkError(ValueError):
    """A link, or a clip to sign, that is not well formed (the message names the field)."""


TIMECODE = re.compile(r"\A(?:(\d{1,12}):)??(?:(\d{1,12}):)?(\d{1,12})(?:\.(\d{1,3}))?\Z")


def _shown(value: object) -> str:
    """``value`` for a message: a number too large to print is named by its size (``repr`` of an int of more than
    4,300 digits raises)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 128:
        return f"a number of {abs(value).bit_length()} bits"
    return repr(value)


def _too_late(field: str, value: object) -> LinkError:
    return LinkError(f"{field} must be at most {MAX_SECONDS} s (24:00:00), got {_shown(value)}")


def milliseconds(value: object, field: str) -> int:
    """Integer milliseconds from seconds (``1134.5``) or ``MM:SS(.fff)`` / ``HH:MM:SS(.fff)``. A link names a time
    to the millisecond: a finer one is refused (no rounding rule for a signer in another language to disagree
    with)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LinkError(f"{field} must be seconds or HH:MM:SS(.fff), got {_shown(value)}")
    if isinstance(value, int):
        if value < 0:
            raise LinkError(f"{field} must not be negative, got {_shown(value)}")
        if value > MAX_SECONDS:
            raise _too_late(field, value)
        return value * 1000
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0:
            raise LinkError(f"{field} must be a finite time of at least 0, got {value!r}")
        if value > MAX_SECONDS:
            raise _too_late(field, value)
        ms = round(value * 1000)
        if abs(value * 1000 - ms) > 1e-6:
            raise LinkError(f"{field} must be given to the millisecond, got {value!r}")
        return ms
    match = TIMECODE.match(value.strip())
    if not match:
        raise LinkError(f"{field} must be seconds, MM:SS(.fff) or HH:MM:SS(.fff) to the millisecond, got {value!r}")
    hours, minutes, seconds, fraction = match.groups()
    if hours is not None and minutes is None:  # "MM:SS": the one colon's number is minutes
        hours, minutes = None, hours
    if (minutes is not None and int(seconds) >= 60) or (hours is not None and int(minutes or 0) >= 60):
        raise LinkError(f"{field} must be seconds, MM:SS(.fff) or HH:MM:SS(.fff), got {value!r}")
    total = (int(hours or 0) * 60 + int(minutes or 0)) * 60 + int(seconds)
    ms = total * 1000 + int((fraction or "").ljust(3, "0"))
    if ms > MAX_MS:
        raise _too_late(field, value)
    return ms


def canonical(clip: Mapping[str, Any]) -> dict[str, Any]:
    """The clip as a link carries it: short names, times in ms, text stripped, defaults left out.

    ``clip`` takes the long names above; ``watermark`` may also be ``{"text": …}`` or ``{"logo": …}`` and ``style``
    ``{"preset": …}``, as in a clip spec."""
    unknown = sorted(set(clip) - set(FIELDS))
    if unknown:
        raise LinkError(f"a link cannot carry {', '.join(unknown)} (it carries {', '.join(FIELDS)})")
    data = dict(clip)
    mark = data.get("watermark")
    if isinstance(mark, Mapping):
        if set(mark) - {"text", "logo"} or len(mark) != 1:
            raise LinkError("watermark: a link carries a text mark or a logo, nothing else about it")
        data["watermark"], data["logo"] = mark.get("text"), mark.get("logo") or data.get("logo")
    style = data.get("style")
    if isinstance(style, Mapping):
        if set(style) - {"preset"}:
            raise LinkError("style: a link carries the caption preset only")
        data["style"] = style.get("preset")
    out: dict[str, Any] = {}
    for name, (short, default) in FIELDS.items():
        value = data.get(name)
        if name in ("start", "end"):
            if value is None:
                raise LinkError(f"{name}: required")
            value = milliseconds(value, name)
        elif name == "expires":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise LinkError(f"expires must be unix seconds, got {_shown(value)}")
        elif value is not None:
            if not isinstance(value, str):
                raise LinkError(f"{name} must be text, got {value!r}")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise LinkError(f"{name} must be well-formed text, got {value!r}") from None
            value = value.strip()
            if name in CHOICES and value not in CHOICES[name]:
                raise LinkError(f"{name} must be one of {', '.join(CHOICES[name])}, got {value!r}")
        if name == "source" and not value:
            raise LinkError("source: required")
        if value is not None and value != default and value != "":
            out[short] = value
    if "w" in out and "l" in out:
        raise LinkError("watermark: a text mark or a logo, not both")
    if out["b"] <= out["a"]:
        raise LinkError(f"end must be after start, got start={out['a'] / 1000} end={out['b'] / 1000}")
    return out


def encode(data: Mapping[str, Any]) -> str:
    """The payload: base64url of the canonical JSON (keys sorted, no spaces, UTF-8), without padding."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def decode(payload: str) -> dict[str, Any]:
    """The payload's fields (short names), or LinkError when it is not a canonical payload."""
    if len(payload) > MAX_PAYLOAD or not re.fullmatch(r"[A-Za-z0-9_-]+", payload):
        raise LinkError("the link's payload is not base64url")
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise LinkError("the link's payload is not JSON") from None
    if not isinstance(data, dict) or set(data) - set(SHORT):
        raise LinkError("the link's payload is not a clip")
    long = {SHORT[k]: v for k, v in data.items()}
    if encode(canonical({**long, "start": _seconds(long.get("start")), "end": _seconds(long.get("end"))})) != payload:
        raise LinkError("the link's payload is not in canonical form")
    return data


def _seconds(ms: object) -> object:
    if isinstance(ms, int) and not isinstance(ms, bool):
        if abs(ms) > MAX_MS:  # before dividing: a number past a float's range would overflow
            raise LinkError("the link's times are out of range")
        return ms / 1000
    return ms


def check_expiry(expires: int | None, now: float | None = None) -> None:
    """LinkError when ``expires`` is later than ``MAX_LIFETIME`` seconds after ``now``."""
    if expires is not None and expires > (time.time() if now is None else now) + MAX_LIFETIME:
        raise LinkError(f"expires must be at most {MAX_LIFETIME} s (ten years) from now, got {_shown(expires)}")


def signature(secret: str | bytes, key_id: str, payload: str) -> str:
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    digest = hmac.new(key, f"{VERSION}:{key_id}:{payload}".encode("ascii"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:SIGNATURE_BYTES]).decode("ascii").rstrip("=")


def rounded_expiry(lifetime: int, now: float | None = None) -> int:
    """A link's expiry for a key whose links live ``lifetime`` seconds, rounded up to a step of a tenth of the
    lifetime (at least a minute, at most an hour), so that links made minutes apart are the same link."""
    step = max(60, min(3600, lifetime // 10))
    at = (time.time() if now is None else now) + lifetime
    return int(math.ceil(at / step) * step)


def sign(
    clip: Mapping[str, Any],
    key_id: str,
    secret: str | bytes,
    base: str = "",
    variant: str = "clip",
    expires: int | None = None,
) -> str:
    """The signed link to ``clip`` (long field names, see ``canonical``) as ``variant``."""
    if not KEY_ID.match(key_id):
        raise LinkError(f"key id must be 1-64 letters, digits, - or _, got {key_id!r}")
    payload = encode(canonical({**clip, "variant": variant, "expires": expires}))
    check_expiry(expires)
    return f"{base.rstrip('/')}{PREFIX}{key_id}/{payload}.{signature(secret, key_id, payload)}.{VARIANTS[variant]}"


def parse(path: str) -> tuple[str, str, str, str]:
    """``(key id, payload, signature, extension)`` of a link's path (``/l/…``), or LinkError."""
    match = re.fullmatch(r"/l/([A-Za-z0-9_-]{1,64})/([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{22})\.(mp4|jpg|vtt)", path)
    if not match:
        raise LinkError("not a clip link")
    key_id, payload, sig, extension = match.groups()
    return key_id, payload, sig, extension


def verify(path: str, secrets: Mapping[str, str | bytes], now: float | None = None) -> dict[str, Any]:
    """The clip a link's path names (long names; times in seconds), once its signature, form and expiry hold.

    Raises LinkError for anything wrong with the link (a 403: which part failed is not said), and
    ``LinkExpired`` for a link past its expiry (a 410)."""
    key_id, payload, sig, extension = parse(path)
    secret = secrets.get(key_id)
    if secret is None or not hmac.compare_digest(signature(secret, key_id, payload), sig):
        raise LinkError("the link's signature does not match")
    data = decode(payload)
    clip = {SHORT[k]: v for k, v in data.items()}
    clip.setdefault("variant", "clip")
    if VARIANTS[clip["variant"]] != extension:
        raise LinkError("the link's extension does not match its variant")
    expires = clip.get("expires")
    now = time.time() if now is None else now
    check_expiry(expires, now)  # out of range: not a link we sign (a 403)
    if expires is not None and now > expires:
        raise LinkExpired("the link has expired")
    clip["start"], clip["end"] = clip["start"] / 1000, clip["end"] / 1000
    return clip


class LinkExpired(LinkError):
    """A well-signed link past its expiry."""
