"""One storage interface: a local folder (the embedded default) or S3 via boto3 (production)."""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, Protocol

from .local import LocalStorage

if TYPE_CHECKING:
    from pathlib import Path

    from quoteclip.settings import Settings

__all__ = ["LocalStorage", "Storage", "open_storage"]


class Storage(Protocol):
    def stat(self, key: str) -> dict[str, str] | None:
        """The stored clip's metadata, or None when the clip is not stored."""

    def put(self, path: Path, key: str, filename: str, metadata: dict[str, str]) -> bool:
        """Store ``path`` under ``key``, once: the clip becomes visible only once complete, and a clip already
        stored is never overwritten (two workers that rendered the same clip both succeed; the first one's bytes
        stand). True when this call stored it, False when it was there already."""

    def put_sidecar(self, key: str, suffix: str, data: bytes, content_type: str) -> None:
        """Store a file that goes with the clip (``.srt``, ``.vtt``, ``.jpg``, ``.manifest.json``)."""

    def has_sidecar(self, key: str, suffix: str) -> bool:
        """Whether a file that goes with the clip is stored, the clip or not (a poster rendered alone)."""

    def get_sidecar(self, key: str, suffix: str) -> bytes | None:
        """A file that goes with the clip, or None when it is not stored."""

    def put_asset(self, name: str, data: bytes, content_type: str) -> None:
        """Store an uploaded brand file (``<sha256>.<ext>``) under ``assets/``."""

    def get_asset(self, name: str) -> bytes | None:
        """An uploaded brand file's bytes, or None when there is none by that name."""

    def put_piece(self, name: str, path: Path) -> None:
        """Store a piece of a clip rendered in pieces (``pieces/<name>``), for the worker that joins them."""

    def get_piece(self, name: str, path: Path) -> bool:
        """Write the piece ``name`` to ``path``; False when it is not stored."""

    def delete_pieces(self, prefix: str) -> int:
        """Remove every piece whose name starts with ``prefix`` (a clip's, once joined or failed); how many."""

    def read(self, key: str) -> BinaryIO:
        """The stored clip as a readable stream (for archives): a file, or the object's body."""

    def link(self, key: str, suffix: str = ".mp4") -> str:
        """A link to download the clip or one of its sidecars (file://, presigned or public https)."""

    def local_path(self, key: str) -> Path | None:
        """The clip's path on this machine, where the store is a local folder."""


def open_storage(settings: Settings) -> Storage:
    if settings.uses_s3:
        from .s3 import S3Storage

        return S3Storage.from_settings(settings)
    return LocalStorage(settings.storage_dir)
