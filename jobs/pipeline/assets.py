"""Brand files in specs: uploads checked and stored by content hash, references resolved to files for a render.

A queued or API job never reads a path it was given: its logo and font are uploaded assets
(``asset:<sha256>.<ext>``, fetched from the store into the job's folder) or the operator's brand files
(``brand:NAME`` in ``QUOTECLIP_BRAND_DIR``). Local paths are for the inline CLI only.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path

from quoteclip import assets
from quoteclip.errors import BadInput
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec
from storage import Storage

MAX_LOGO_BYTES = 4 * 1024**2
MAX_FONT_BYTES = 24 * 1024**2
MAX_LOGO_SIDE = 4096
CONTENT_TYPES = {"png": "image/png", "ttf": "font/ttf", "otf": "font/otf", "ttc": "font/collection"}


# PNG chunks whose data is zlib-compressed, and where it starts: after a keyword (zTXt, iCCP: a name), its NUL and
# a method byte; iTXt: a keyword, its NUL, a flag (compressed or not) and a method byte, a language and a
# translated keyword, each ended by a NUL.
COMPRESSED_CHUNKS = (b"zTXt", b"iCCP", b"iTXt")


def _compressed_chunks_within(data: bytes) -> None:
    """Refuse a PNG whose compressed ancillary chunks (text, ICC profile) inflate past what the renderer's Pillow
    reads of one (``PngImagePlugin.MAX_TEXT_CHUNK``): ``verify`` only checks their checksums, and Pillow inflates
    them when the logo is drawn, so such a logo (an 800 MB zTXt in 800 KB) failed every render that used it."""
    import zlib

    from PIL import PngImagePlugin

    limit, at = PngImagePlugin.MAX_TEXT_CHUNK, 8
    while at + 8 <= len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        at += 12 + length
        if kind not in COMPRESSED_CHUNKS:
            continue
        start = body.find(b"\0") + 2  # the keyword, its NUL, the method (zTXt, iCCP)
        if kind == b"iTXt":
            if body[start - 1 : start] != b"\1":  # not compressed
                continue
            start = body.find(b"\0", body.find(b"\0", start + 1) + 1) + 1  # the language and translated keyword
        inflater = zlib.decompressobj()
        try:
            inflater.decompress(body[start:], limit + 1)
        except zlib.error:
            raise BadInput(f"asset: the PNG's {kind.decode()} chunk is not readable") from None
        if inflater.unconsumed_tail:
            raise BadInput(
                f"asset: the PNG's {kind.decode()} chunk inflates past {limit // 1024**2} MB, more than a logo's "
                "text or colour profile may hold"
            )


def check_upload(data: bytes) -> str:
    """The kind of an uploaded brand file (png, ttf, otf, ttc), read from its bytes; BadInput otherwise."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(data) > MAX_LOGO_BYTES:
            raise BadInput(f"asset: a PNG logo may be at most {MAX_LOGO_BYTES // 1024**2} MB, got {len(data)} bytes")
        from PIL import Image

        try:
            with Image.open(io.BytesIO(data)) as img:
                if max(img.size) > MAX_LOGO_SIDE:
                    raise BadInput(
                        f"asset: a logo may be at most {MAX_LOGO_SIDE} px a side, got {img.width}x{img.height}"
                    )
                img.verify()
        except BadInput:
            raise
        except Exception:  # noqa: BLE001  (any decoder error: the upload is not an image)
            raise BadInput("asset: not a readable PNG image") from None
        _compressed_chunks_within(data)
        return "png"
    kind = {b"\x00\x01\x00\x00": "ttf", b"true": "ttf", b"OTTO": "otf", b"ttcf": "ttc"}.get(data[:4])
    if kind is None:
        raise BadInput("asset: only PNG logos and TrueType/OpenType fonts (.ttf, .otf, .ttc) can be uploaded")
    if len(data) > MAX_FONT_BYTES:
        raise BadInput(f"asset: a font may be at most {MAX_FONT_BYTES // 1024**2} MB, got {len(data)} bytes")
    from fontTools.ttLib import TTCollection, TTFont

    try:
        font = TTCollection(io.BytesIO(data)).fonts[0] if kind == "ttc" else TTFont(io.BytesIO(data), lazy=True)
        font["cmap"]
    except Exception:  # noqa: BLE001  (any parser error: the upload is not a font)
        raise BadInput("asset: not a readable TrueType/OpenType font") from None
    return kind


def upload(storage: Storage, data: bytes) -> str:
    """Check and store an uploaded brand file; its reference (``asset:<sha256>.<ext>``) for specs."""
    kind = check_upload(data)
    name = f"{hashlib.sha256(data).hexdigest()}.{kind}"
    storage.put_asset(name, data, CONTENT_TYPES[kind])
    return f"asset:{name}"


def refs(spec: ClipSpec) -> dict[str, str]:
    """The brand files a spec names, by field."""
    found = {"font": spec.font} if spec.font else {}
    if spec.watermark is not None and spec.watermark.logo:
        found["watermark.logo"] = spec.watermark.logo
    if spec.background is not None and not spec.background.startswith("#"):
        found["background"] = spec.background
    return found


def check_allowed(spec: ClipSpec, allow_paths: bool) -> None:
    """Refuse local paths where the caller may not read this machine's files (queued and API jobs)."""
    for field, ref in refs(spec).items():
        if assets.is_path(ref) and not allow_paths:
            raise BadInput(
                f"{field}: local paths are not allowed here, got {ref[:100]!r} (upload the file with POST /assets, "
                "or name an operator brand file as brand:NAME)"
            )


def brand_file(ref: str, settings: Settings, field: str) -> Path:
    name = ref.removeprefix("brand:")
    if settings.brand_dir is None:
        raise BadInput(f"{field}: no brand files are configured here (QUOTECLIP_BRAND_DIR), got {ref!r}")
    path = settings.brand_dir / name
    if not path.is_file():
        raise BadInput(f"{field}: no brand file named {name!r}")
    return path


def identity(ref: str | None, settings: Settings) -> str | None:
    """What a reference stands for in a clip's key: the content hash of an asset, the name, size and time of a
    brand file or a local file (a changed file makes a new clip)."""
    if ref is None or assets.is_asset(ref):
        return ref
    path = brand_file(ref, settings, "brand") if assets.is_brand(ref) else Path(ref)
    try:
        st = path.stat()
    except OSError:
        return ref
    return f"{ref}:{path.resolve() if assets.is_path(ref) else ''}:{st.st_size}:{st.st_mtime_ns}"


def identities(settings: Settings) -> Callable[[str | None], str | None]:
    return lambda ref: identity(ref, settings)


def upload_paths(spec: ClipSpec, storage: Storage) -> ClipSpec:
    """The spec with every local path uploaded and named as an asset (``quoteclip enqueue`` does this, so the
    workers never read the caller's disk)."""
    return _replace(
        spec, {field: upload(storage, _read(ref, field)) for field, ref in refs(spec).items() if assets.is_path(ref)}
    )


def _read(path: str, field: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{field} file not found: {path!r}") from None
    except OSError as exc:
        raise BadInput(f"{field} file cannot be read: {path!r} ({exc.strerror})") from None


def _replace(spec: ClipSpec, local: dict[str, str]) -> ClipSpec:
    update: dict[str, object] = {}
    if "font" in local:
        update["font"] = local["font"]
    if "watermark.logo" in local and spec.watermark is not None:
        update["watermark"] = spec.watermark.model_copy(update={"logo": local["watermark.logo"]})
    if "background" in local:
        update["background"] = local["background"]
    return spec.model_copy(update=update) if update else spec


def localize(spec: ClipSpec, settings: Settings, storage: Storage, workdir: Path) -> ClipSpec:
    """The spec with every brand file as a readable local path (assets fetched into ``workdir``)."""
    check_allowed(spec, settings.allow_local_sources is True)
    local: dict[str, str] = {}
    for field, ref in refs(spec).items():
        if assets.is_asset(ref):
            name = ref.removeprefix("asset:")
            data = storage.get_asset(name)
            if data is None or hashlib.sha256(data).hexdigest() != name.split(".")[0]:
                raise BadInput(f"{field}: no uploaded asset {ref!r} (upload it with POST /assets)")
            path = workdir / f"asset-{name}"
            path.write_bytes(data)
            local[field] = str(path)
        elif assets.is_brand(ref):
            local[field] = str(brand_file(ref, settings, field))
        elif not Path(ref).is_file():
            raise BadInput(f"{field} file not found: {ref!r}")
    return _replace(spec, local)
