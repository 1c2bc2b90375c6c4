"""Names for media that every layer shares."""

from __future__ import annotations

import io
from typing import IO

Readable = str | io.RawIOBase | IO[bytes]  # a path or URL, or a seekable binary file (what a probe reads)
