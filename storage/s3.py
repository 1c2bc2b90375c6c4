"""S3-compatible object storage via boto3: path-style, checksummed uploads, presigned or public links."""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import quote

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from quoteclip.errors import StorageFailed
from quoteclip.settings import Settings

log = logging.getLogger(__name__)

PREFIX = "clips/"
# Below this size a clip goes up in one PUT with Content-MD5 (the store verifies it); above, multipart with
# a SHA-256 checksum per part. Either way the object appears under its key only once complete.
SINGLE_PUT_LIMIT = 64 * 1024 * 1024
ASSETS = "assets/"  # uploaded brand files (logos, fonts), by content hash
CACHE_CONTROL = "public, max-age=31536000, immutable"  # content-addressed: a key's bytes never change


class S3Storage:
    def __init__(self, client: Any, bucket: str, link_ttl: int, public_base_url: str | None = None) -> None:
        self.client = client
        self.bucket = bucket
        self.link_ttl = link_ttl
        self.public_base_url = public_base_url

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Storage:
        assert settings.s3_bucket is not None
        client = boto3.client(
            "s3",
            endpoint_url=settings.s3_endpoint,
            region_name=settings.s3_region,
            aws_access_key_id=settings.aws_access_key_id,
            aws_secret_access_key=settings.aws_secret_access_key,
            config=Config(
                s3={"addressing_style": "path"},
                signature_version="s3v4",
                retries={"max_attempts": 4, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
            ),
        )
        return cls(client, settings.s3_bucket, settings.link_ttl, settings.public_base_url)

    def object_key(self, key: str, suffix: str = ".mp4") -> str:
        return f"{PREFIX}{key}{suffix}"

    def stat(self, key: str) -> dict[str, str] | None:
        with _store_errors(f"could not look up {self.object_key(key)} in bucket {self.bucket}", absent=True):
            return dict(self.client.head_object(Bucket=self.bucket, Key=self.object_key(key)).get("Metadata", {}))
        return None

    def put(self, path: Path, key: str, filename: str, metadata: dict[str, str]) -> None:
        name = self.object_key(key)
        size = path.stat().st_size
        extra = {
            "ContentType": "video/mp4",
            "ContentDisposition": content_disposition(filename),
            "CacheControl": CACHE_CONTROL,
            "Metadata": metadata,
        }
        with _store_errors(f"upload of {name} to bucket {self.bucket} failed"):
            if size <= SINGLE_PUT_LIMIT:
                data = path.read_bytes()
                md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
                self.client.put_object(Bucket=self.bucket, Key=name, Body=data, ContentMD5=md5, **extra)
            else:
                self.client.upload_file(
                    str(path),
                    self.bucket,
                    name,
                    ExtraArgs={**extra, "ChecksumAlgorithm": "SHA256"},
                    Config=TransferConfig(multipart_threshold=SINGLE_PUT_LIMIT, multipart_chunksize=16 * 1024 * 1024),
                )
            head = self.client.head_object(Bucket=self.bucket, Key=name)
        if int(head.get("ContentLength", -1)) != size:
            raise StorageFailed(f"upload of {name} came back with {head.get('ContentLength')} bytes, expected {size}")
        log.info("uploaded %s (%d bytes)", name, size)

    def put_sidecar(self, key: str, suffix: str, data: bytes, content_type: str) -> None:
        self._put_bytes(self.object_key(key, suffix), data, content_type)

    def has_sidecar(self, key: str, suffix: str) -> bool:
        name = self.object_key(key, suffix)
        with _store_errors(f"could not look up {name} in bucket {self.bucket}", absent=True):
            self.client.head_object(Bucket=self.bucket, Key=name)
            return True
        return False

    def put_asset(self, name: str, data: bytes, content_type: str) -> None:
        self._put_bytes(f"{ASSETS}{name}", data, content_type)

    def get_asset(self, name: str) -> bytes | None:
        with _store_errors(f"could not read asset {name} from bucket {self.bucket}", absent=True):
            return bytes(self.client.get_object(Bucket=self.bucket, Key=f"{ASSETS}{name}")["Body"].read())
        return None

    def read(self, key: str) -> BinaryIO:
        with _store_errors(f"could not read {self.object_key(key)} from bucket {self.bucket}"):
            body = self.client.get_object(Bucket=self.bucket, Key=self.object_key(key))["Body"]
        return cast(BinaryIO, body)

    def _put_bytes(self, name: str, data: bytes, content_type: str) -> None:
        md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
        with _store_errors(f"upload of {name} to bucket {self.bucket} failed"):
            self.client.put_object(
                Bucket=self.bucket,
                Key=name,
                Body=data,
                ContentMD5=md5,
                ContentType=content_type,
                CacheControl=CACHE_CONTROL,
            )

    def link(self, key: str, suffix: str = ".mp4") -> str:
        name = self.object_key(key, suffix)
        if self.public_base_url:
            return f"{self.public_base_url}/{quote(name)}"
        with _store_errors(f"could not sign a link for {name}"):
            return str(
                self.client.generate_presigned_url(
                    "get_object", Params={"Bucket": self.bucket, "Key": name}, ExpiresIn=self.link_ttl
                )
            )

    def local_path(self, key: str) -> Path | None:
        return None


@contextmanager
def _store_errors(doing: str, absent: bool = False) -> Iterator[None]:
    """The one mapping of boto3's errors to ours: ``StorageFailed`` (transient: the queue retries) saying what was
    being done, or that the store did not answer. With ``absent``, a missing object is no error: the block is left
    and the caller answers "not there"."""
    try:
        yield
    except ClientError as exc:
        if absent and exc.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
            return
        raise StorageFailed(f"{doing}: {exc}") from exc
    except BotoCoreError as exc:
        raise StorageFailed(f"{doing}: object store unreachable: {exc}") from exc


def content_disposition(filename: str) -> str:
    """``attachment`` with an ASCII-safe name (the name is built by the project, never raw user text)."""
    safe = "".join(c for c in filename if c.isascii() and (c.isalnum() or c in "-_.")).lstrip(".") or "clip.mp4"
    return f'attachment; filename="{safe}"'
