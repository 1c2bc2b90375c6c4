"""Signed clip links: the canonical form of a clip a link names, and its signature.

A website signs a link with its site key (a site id, a key id and a secret the operator gave it) without asking
the service anything, puts it in an ``<a href>``, a ``<video src>`` or a ``<video poster>``, and the service renders
the clip on the first request. This module is the whole of the signing: it uses the standard library only and
imports nothing else of quoteclip, so a site's backend can copy it or import it on its own (``docs/websites.md``
has the same signer in JavaScript and the canonical form written out for any other language; the tests check
that both signers make the same links byte for byte, or both refuse).

A link is ``{base}/l/{signer}/{payload}.{signature}.{extension}``:

- ``signer``: the site id, then ``.`` and the key id when the key has one (``starzero.k2``); a site's key listed
  without an id (``QUOTECLIP_SITE_KEYS=site:secret``, the form before key ids) signs as the site id alone.
- ``payload``: base64url (no padding) of the canonical JSON of the clip (``canonical`` and ``encode``).
- ``signature``: the first 16 bytes of HMAC-SHA256(secret, ``"quoteclip-link-1:{signer}:{payload}"``),
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

The service verifies the signature over the payload's bytes, then accepts the payload only in canonical form
(the bytes ``encode(canonical(…))`` makes of it): one clip has one link per key and variant, and a signer that
strays from the form is told at its first link (a 403) rather than splitting a CDN's cache or escaping a
revocation unnoticed.
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
KEY_ID = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")  # a site id, and a key id
SIGNER = re.compile(r"\A([A-Za-z0-9_-]{1,64})(?:\.([A-Za-z0-9_-]{1,64}))?\Z")  # site, or site.keyid
MAX_SECONDS = 24 * 3600  # the latest start or end a link names: 24 hours
MAX_MS = MAX_SECONDS * 1000
MAX_LIFETIME = 10 * 365 * 24 * 3600  # the latest expiry: ten years after now (when signed, when verified)
# The characters trimmed from both ends of a text: ASCII whitespace (TAB, LF, VT, FF, CR, SPACE) and nothing else
# (not Python's str.strip(), nor JavaScript's trim(): each removes other characters too, and differently).
WHITESPACE = "\t\n\x0b\x0c\r "
# A time as text: [[H:]M:]S[.fff], ASCII digits only (Python's \d would take any script's digits).
TIMECODE = re.compile(r"\A(?:([0-9]{1,12}):)??(?:([0-9]{1,12}):)?([0-9]{1,12})(?:\.([0-9]{1,3}))?\Z")

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


def _shown(value: object) -> str:
    """``value`` for a message: a number too large to print is named by its size (``repr`` of an int of more than
    4,300 digits raises), a long text cut."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 128:
        return f"a number of {abs(value).bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _too_late(field: str, value: object) -> LinkError:
    return LinkError(f"{field} must be at most {MAX_SECONDS} s (24:00:00), got {_shown(value)}")


def trim(text: str) -> str:
    """``text`` without the ASCII whitespace (``WHITESPACE``) at either end."""
    return text.strip(WHITESPACE)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def milliseconds(value: object, field: str) -> int:
    """Integer milliseconds from seconds (a number: ``1134.5``) or text ``S(.fff)``, ``M:SS(.fff)``,
    ``H:MM:SS(.fff)`` (ASCII digits, trimmed of ASCII whitespace). A number is taken as an IEEE-754 double: at
    most 86400, times 1000 within 1e-6 of an integer, which is the time (a finer time is refused, not rounded)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LinkError(f"{field} must be seconds or HH:MM:SS(.fff), got {_shown(value)}")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise LinkError(f"{field} must be a finite time of at least 0, got {value!r}")
        if value < 0:
            raise LinkError(f"{field} must not be negative, got {_shown(value)}")
        if value > MAX_SECONDS:
            raise _too_late(field, value)
        scaled = float(value) * 1000
        ms = round(scaled)
        if abs(scaled - ms) > 1e-6:
            raise LinkError(f"{field} must be given to the millisecond, got {value!r}")
        return ms
    match = TIMECODE.match(trim(value))
    if not match:
        raise LinkError(
            f"{field} must be seconds, MM:SS(.fff) or HH:MM:SS(.fff) in ASCII digits to the millisecond, "
            f"got {_shown(value)}"
        )
    hours, minutes, seconds, fraction = match.groups()
    if hours is not None and minutes is None:  # "MM:SS": the one colon's number is minutes
        hours, minutes = None, hours
    if (minutes is not None and int(seconds) >= 60) or (hours is not None and int(minutes or 0) >= 60):
        raise LinkError(f"{field} must be seconds, MM:SS(.fff) or HH:MM:SS(.fff), got {_shown(value)}")
    total = (int(hours or 0) * 60 + int(minutes or 0)) * 60 + int(seconds)
    ms = total * 1000 + int((fraction or "").ljust(3, "0"))
    if ms > MAX_MS:
        raise _too_late(field, value)
    return ms


def _one_member(value: Mapping[Any, Any], field: str, names: tuple[str, ...]) -> tuple[str, object]:
    if len(value) != 1 or next(iter(value)) not in names:
        raise LinkError(f"{field}: an object here has exactly one member, {' or '.join(names)}")
    name = next(iter(value))
    return name, value[name]


def canonical(clip: Mapping[str, Any]) -> dict[str, Any]:
    """The clip as a link carries it: short names, times in ms, text trimmed, empty and default values left out.

    ``clip`` takes the long names above and nothing else (null is the same as absent); ``watermark`` may also be
    ``{"text": …}`` or ``{"logo": …}`` and ``style`` ``{"preset": …}``, as in a clip spec. The rules, for a signer
    in any language, are in docs/websites.md ("The canonical form")."""
    if not isinstance(clip, Mapping):
        raise LinkError(f"clip must be an object of the fields a link carries, got {_shown(clip)}")
    unknown = sorted(str(name) for name in clip if name not in FIELDS)
    if unknown:
        raise LinkError(f"a link cannot carry {', '.join(n[:64] for n in unknown)} (it carries {', '.join(FIELDS)})")
    data = {name: value for name, value in clip.items() if value is not None}
    mark = data.get("watermark")
    if isinstance(mark, Mapping):
        member, value = _one_member(mark, "watermark", ("text", "logo"))
        del data["watermark"]
        if member == "logo" and value is not None:
            if "logo" in data:
                raise LinkError("logo: given twice (as watermark.logo and as logo)")
            data["logo"] = value
        elif member == "text" and value is not None:
            data["watermark"] = value
    style = data.get("style")
    if isinstance(style, Mapping):
        _, value = _one_member(style, "style", ("preset",))
        data["style"] = value
    out: dict[str, Any] = {}
    for name, (short, default) in FIELDS.items():
        value = data.get(name)
        if value is None:
            pass
        elif name in ("start", "end"):
            value = milliseconds(value, name)
        elif name == "expires":
            if not _is_number(value) or value < 0 or (isinstance(value, float) and not value.is_integer()):
                raise LinkError(f"expires must be unix seconds (a whole number of at least 0), got {_shown(value)}")
            value = int(value)
        else:
            if not isinstance(value, str):
                raise LinkError(f"{name} must be text, got {_shown(value)}")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise LinkError(f"{name} must be well-formed text (no lone surrogate), got {_shown(value)}") from None
            value = trim(value)
            if name in CHOICES and value not in CHOICES[name]:
                raise LinkError(f"{name} must be one of {', '.join(CHOICES[name])}, got {_shown(value)}")
        if value is not None and value != default and value != "":
            out[short] = value
    for name, short in (("source", "s"), ("start", "a"), ("end", "b")):
        if short not in out:
            raise LinkError(f"{name}: required")
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


def signer(site: str, key_id: str | None = None) -> str:
    """The link's signer segment: ``site``, or ``site.key_id`` for a key with an id."""
    if not KEY_ID.match(site):
        raise LinkError(f"site must be 1-64 letters, digits, - or _, got {_shown(site)}")
    if key_id is None:
        return site
    if not KEY_ID.match(key_id):
        raise LinkError(f"key id must be 1-64 letters, digits, - or _, got {_shown(key_id)}")
    return f"{site}.{key_id}"


def site_of(signer: str) -> str:
    """The site id of a link's signer segment (``starzero.k2`` → ``starzero``)."""
    return signer.partition(".")[0]


def signature(secret: str | bytes, signer: str, payload: str) -> str:
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    digest = hmac.new(key, f"{VERSION}:{signer}:{payload}".encode("ascii"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:SIGNATURE_BYTES]).decode("ascii").rstrip("=")


def rounded_expiry(lifetime: int, now: float | None = None) -> int:
    """A link's expiry for a key whose links live ``lifetime`` seconds, rounded up to a step of a tenth of the
    lifetime (at least a minute, at most an hour), so that links made minutes apart are the same link."""
    step = max(60, min(3600, lifetime // 10))
    at = (time.time() if now is None else now) + lifetime
    return int(math.ceil(at / step) * step)


def sign(
    clip: Mapping[str, Any],
    site: str,
    secret: str | bytes,
    base: str = "",
    variant: str = "clip",
    expires: int | None = None,
    key_id: str | None = None,
) -> str:
    """The signed link to ``clip`` (long field names, see ``canonical``) as ``variant``, signed by the site's key
    ``key_id`` (None: the site's key listed without an id)."""
    who = signer(site, key_id)
    if not isinstance(secret, str | bytes) or not secret:  # an unset variable's None or "": never an empty key
        raise LinkError("secret: the site key's secret is missing (text, as QUOTECLIP_SITE_KEYS gives it)")
    if isinstance(secret, str) and not secret.isascii():
        try:
            secret.encode("utf-8")
        except UnicodeEncodeError:
            raise LinkError("secret: must be well-formed text (no lone surrogate)") from None
    if variant not in VARIANTS:
        raise LinkError(f"variant must be one of {', '.join(VARIANTS)}, got {_shown(variant)}")
    if not isinstance(clip, Mapping):
        raise LinkError(f"clip must be an object of the fields a link carries, got {_shown(clip)}")
    payload = encode(canonical({**clip, "variant": variant, "expires": expires}))
    if expires is not None:
        check_expiry(int(expires))
    if len(payload) > MAX_PAYLOAD:
        raise LinkError(
            f"the clip is too long for a link: its payload is {len(payload)} characters, over {MAX_PAYLOAD}"
        )
    return f"{base.rstrip('/')}{PREFIX}{who}/{payload}.{signature(secret, who, payload)}.{VARIANTS[variant]}"


LINK = re.compile(
    r"/l/([A-Za-z0-9_-]{1,64}(?:\.[A-Za-z0-9_-]{1,64})?)/([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{22})\.(mp4|jpg|vtt)"
)


def parse(path: str) -> tuple[str, str, str, str]:
    """``(signer, payload, signature, extension)`` of a link's path (``/l/…``), or LinkError."""
    match = LINK.fullmatch(path)
    if not match:
        raise LinkError("not a clip link")
    who, payload, sig, extension = match.groups()
    return who, payload, sig, extension


def path_of(link: str) -> str:
    """A link's path (``/l/…``) from the link as a page has it (with the service's address, or without): its last
    ``/l/`` but one segment, so a base holding ``/l/`` (a proxy's path) is no part of it."""
    rest = link.split("#", 1)[0].split("?", 1)[0]
    at = rest.rfind(PREFIX, 0, rest.rfind("/"))
    if rest.find(PREFIX) < 0 or at < 0:
        raise LinkError("not a clip link: no /l/ in it")
    return rest[at:]


def link_hash(path: str) -> str:
    """A link's hash: the SHA-256 (hex) of its token, ``{payload}.{signature}`` (the logs name a link by the first
    12 characters of it); a revocation names a link by it."""
    _, payload, sig, _ = parse(path)
    return hashlib.sha256(f"{payload}.{sig}".encode("ascii")).hexdigest()


def clip_hash(data: Mapping[str, Any]) -> str:
    """A clip's hash, whatever variant or expiry a link gives it (short names, as ``decode`` answers): every link
    of a site naming the clip has it."""
    rest = {short: value for short, value in data.items() if short not in ("v", "x")}
    return hashlib.sha256(encode(rest).encode("ascii")).hexdigest()


def verify(path: str, secrets: Mapping[str, str | bytes], now: float | None = None) -> dict[str, Any]:
    """The clip a link's path names (long names; times in seconds), once its signature, form and expiry hold.

    ``secrets``: each live key's secret by its signer segment (``site`` or ``site.keyid``). Raises LinkError for
    anything wrong with the link (a 403: which part failed is not said), and ``LinkExpired`` for a link past its
    expiry (a 410)."""
    who, payload, sig, extension = parse(path)
    secret = secrets.get(who)
    if secret is None or not hmac.compare_digest(signature(secret, who, payload), sig):
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
