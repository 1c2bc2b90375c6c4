"""How a spec names a brand file (a logo PNG, a font): the three forms and their syntax.

- ``asset:<sha256>.<ext>``: a file uploaded to the store (``POST /assets``, or ``quoteclip enqueue`` uploading a
  local file first), named by its content hash;
- ``brand:<name>``: a file the operator put in ``QUOTECLIP_BRAND_DIR``;
- a local path: only where the caller may read this machine's files (the inline CLI), never in queued or API jobs.
"""

from __future__ import annotations

import re

ASSET = re.compile(r"\Aasset:([0-9a-f]{64})\.(png|ttf|otf|ttc)\Z")
BRAND = re.compile(r"\Abrand:([A-Za-z0-9][A-Za-z0-9._-]{0,99})\Z")
FONT_SUFFIXES = (".ttf", ".otf", ".ttc")


def is_asset(ref: str) -> bool:
    return ASSET.match(ref) is not None


def is_brand(ref: str) -> bool:
    return BRAND.match(ref) is not None


def is_path(ref: str) -> bool:
    """Neither an uploaded asset nor a brand name: a path on the machine that reads it."""
    return not ref.startswith(("asset:", "brand:"))


def check_ref(ref: str, field: str, suffixes: tuple[str, ...]) -> str:
    """The syntax of a reference (no file is looked at here: whether it exists is the reader's business)."""
    if ref.startswith("asset:") and not is_asset(ref):
        raise ValueError(f"{field} must be asset:<64 hex digits>.<ext> as POST /assets answered, got {ref[:100]!r}")
    if ref.startswith("brand:") and not is_brand(ref):
        raise ValueError(f"{field} must be brand:NAME (letters, digits, . _ -), got {ref[:100]!r}")
    if not ref.lower().endswith(suffixes):
        kinds = " or ".join([", ".join(suffixes[:-1]), suffixes[-1]] if len(suffixes) > 1 else suffixes)
        raise ValueError(f"{field} must be a {kinds} file, got {ref[:100]!r}")
    return ref
