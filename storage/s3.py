"""S3-compatible object storage via boto3: path-style, checksummed uploads, presigned or public links."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import quote

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from quoteclip.errors import StorageFailed
from quoteclip.settings import Settings

log = logging.getLogger(__name__)

PREFIX = "clips/"
# Below this size a clip goes up in one PUT with Content-MD5 (the store verifies it); above, multipart with
# a SHA-256 checksum per part. Either way the object appears under its key only once complete.
SINGLE_PUT_LIMIT = 64 * 1024 * 1024
PART_SIZE = 16 * 1024 * 1024
PART_THREADS = 4  # parts in flight at once (each holds PART_SIZE in memory)
# A marker of a few bytes written twice with If-None-Match: * (then deleted) to learn whether the store refuses
# a second write of a key; a name of its own each time, so probes of several processes never meet
PROBE = "probes/if-none-match-"
_CONDITIONAL: dict[tuple[str, str], bool] = {}  # (endpoint, bucket) -> the probe's answer, once per process
TAKEN = {"PreconditionFailed", "412"}  # If-None-Match: * refused: an object has the key
CONFLICT = {"ConditionalRequestConflict", "409"}  # a write of the key under way at the same time
UNSUPPORTED = {"NotImplemented", "501", "InvalidArgument", "InvalidRequest"}  # a store refusing the header itself
NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
ASSETS = "assets/"  # uploaded brand files (logos, fonts), by content hash
PIECES = "pieces/"  # the pieces of clips rendered in pieces, until they are joined
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

    def put(self, path: Path, key: str, filename: str, metadata: dict[str, str]) -> bool:
        """Store the clip once: with ``If-None-Match: *`` where the store honours it, so of two workers rendering
        the same clip (a job duplicated by a Redis failover, a lease that lapsed) only the first writes it; else
        after a look for it (a narrower window, not none). True when this call stored the clip, False when it was
        there already (the first writer's bytes stand: they are this clip) or when the stored object's ETag is not
        this write's (a store that let two writes through: the last one's stands)."""
        name = self.object_key(key)
        size = path.stat().st_size
        extra = {
            "ContentType": "video/mp4",
            "ContentDisposition": content_disposition(filename),
            "CacheControl": CACHE_CONTROL,
            "Metadata": metadata,
        }
        with _store_errors(f"upload of {name} to bucket {self.bucket} failed"):
            once = self.conditional_writes()
            etag = self._upload(path, name, size, extra, once) if once or not self._exists(name) else None
            head = self.client.head_object(Bucket=self.bucket, Key=name) if etag is not None else {}
        if etag is None or head.get("ETag") != etag:  # refused, or another writer's write landed after ours
            log.info("%s was stored by another writer: its bytes stand", name)
            return False
        if int(head.get("ContentLength", -1)) != size:
            raise StorageFailed(f"upload of {name} came back with {head.get('ContentLength')} bytes, expected {size}")
        log.info("uploaded %s (%d bytes)", name, size)
        return True

    def conditional_writes(self) -> bool:
        """Whether the store refuses a second ``If-None-Match: *`` write of a key (AWS S3, MinIO, SeaweedFS do):
        asked once per process and store, by writing a marker of a few bytes twice. Errors are the caller's."""
        where = (str(self.client.meta.endpoint_url), self.bucket)
        if where not in _CONDITIONAL:
            _CONDITIONAL[where] = self._probe()
        return _CONDITIONAL[where]

    def _probe(self) -> bool:
        marker = f"{PROBE}{uuid.uuid4().hex}"
        try:
            for _ in range(2):
                self.client.put_object(Bucket=self.bucket, Key=marker, Body=b"If-None-Match: *\n", IfNoneMatch="*")
        except ClientError as exc:
            if _code(exc) not in TAKEN | UNSUPPORTED:
                raise
            refused = _code(exc) in TAKEN
        else:
            refused = False
        finally:
            with suppress(ClientError, BotoCoreError):  # a bucket that allows no delete keeps the marker
                self.client.delete_object(Bucket=self.bucket, Key=marker)
        if not refused:
            log.warning("bucket %s does not refuse a second write of a key: clips are stored after a look", self.bucket)
        return refused

    def _upload(self, path: Path, name: str, size: int, extra: dict[str, Any], once: bool) -> str | None:
        """One PUT with Content-MD5 (the store verifies it) up to SINGLE_PUT_LIMIT, multipart above it; with
        ``once``, on condition that no object has the key. The stored object's ETag, or None when an object had
        the key: a 412, or a 409 (a write of the key under way at the same time) once the key is found stored."""
        condition = {"IfNoneMatch": "*"} if once else {}
        conflicts = 0
        while True:
            try:
                if size <= SINGLE_PUT_LIMIT:
                    data = path.read_bytes()
                    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
                    done = self.client.put_object(
                        Bucket=self.bucket, Key=name, Body=data, ContentMD5=md5, **extra, **condition
                    )
                else:
                    done = self._multipart(path, name, size, extra, condition)
                return str(done["ETag"])
            except ClientError as exc:
                if once and _code(exc) in TAKEN:
                    return None
                if not (once and _code(exc) in CONFLICT):
                    raise
                if self._exists(name):
                    return None
                conflicts += 1
                if conflicts > 2:  # the other write failed each time: the queue retries the job
                    raise

    def _multipart(
        self, path: Path, name: str, size: int, extra: dict[str, Any], condition: dict[str, str]
    ) -> dict[str, Any]:
        """Parts of PART_SIZE, each with a SHA-256 checksum the store verifies, PART_THREADS at a time; the object
        appears under its key only when the upload completes (with the condition), and is aborted otherwise."""
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=name, ChecksumAlgorithm="SHA256", **extra)[
            "UploadId"
        ]

        def send(number: int) -> dict[str, Any]:
            with open(path, "rb") as file:
                body = os.pread(file.fileno(), PART_SIZE, (number - 1) * PART_SIZE)
            part = self.client.upload_part(
                Bucket=self.bucket,
                Key=name,
                UploadId=upload,
                PartNumber=number,
                Body=body,
                ChecksumAlgorithm="SHA256",
            )
            checksum = {"ChecksumSHA256": part["ChecksumSHA256"]} if part.get("ChecksumSHA256") else {}
            return {"PartNumber": number, "ETag": part["ETag"], **checksum}

        try:
            with ThreadPoolExecutor(max_workers=PART_THREADS) as pool:
                parts = list(pool.map(send, range(1, -(-size // PART_SIZE) + 1)))
            return dict(
                self.client.complete_multipart_upload(
                    Bucket=self.bucket, Key=name, UploadId=upload, MultipartUpload={"Parts": parts}, **condition
                )
            )
        except BaseException:
            with suppress(ClientError, BotoCoreError):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=name, UploadId=upload)
            raise

    def _exists(self, name: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=name)
        except ClientError as exc:
            if _code(exc) in NOT_FOUND:
                return False
            raise
        return True

    def put_sidecar(self, key: str, suffix: str, data: bytes, content_type: str) -> None:
        # a manifest is stored again once its clip's report is made (jobs/pipeline/quality.py): a cache asks again
        cache = "no-cache" if suffix == ".manifest.json" else CACHE_CONTROL
        self._put_bytes(self.object_key(key, suffix), data, content_type, cache)

    def get_sidecar(self, key: str, suffix: str) -> bytes | None:
        name = self.object_key(key, suffix)
        with _store_errors(f"could not read {name} from bucket {self.bucket}", absent=True):
            return bytes(self.client.get_object(Bucket=self.bucket, Key=name)["Body"].read())
        return None

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

    def put_piece(self, name: str, path: Path) -> None:
        with _store_errors(f"upload of piece {name} to bucket {self.bucket} failed"):
            self.client.upload_file(str(path), self.bucket, f"{PIECES}{name}")

    def get_piece(self, name: str, path: Path) -> bool:
        with _store_errors(f"could not read piece {name} from bucket {self.bucket}", absent=True):
            self.client.download_file(self.bucket, f"{PIECES}{name}", str(path))
            return True
        return False

    def delete_pieces(self, prefix: str) -> int:
        gone = 0
        with _store_errors(f"could not remove pieces {prefix}* from bucket {self.bucket}"):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{PIECES}{prefix}"
            )
            for page in pages:
                names = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                if names:
                    self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": names, "Quiet": True})
                    gone += len(names)
        return gone

    def read(self, key: str) -> BinaryIO:
        with _store_errors(f"could not read {self.object_key(key)} from bucket {self.bucket}"):
            body = self.client.get_object(Bucket=self.bucket, Key=self.object_key(key))["Body"]
        return cast(BinaryIO, body)

    def _put_bytes(self, name: str, data: bytes, content_type: str, cache: str = CACHE_CONTROL) -> None:
        md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
        with _store_errors(f"upload of {name} to bucket {self.bucket} failed"):
            self.client.put_object(
                Bucket=self.bucket,
                Key=name,
                Body=data,
                ContentMD5=md5,
                ContentType=content_type,
                CacheControl=cache,
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
        if absent and _code(exc) in NOT_FOUND:
            return
        raise StorageFailed(f"{doing}: {exc}") from exc
    except BotoCoreError as exc:
        raise StorageFailed(f"{doing}: object store unreachable: {exc}") from exc


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def content_disposition(filename: str) -> str:
    """``attachment`` with an ASCII-safe name (the name is built by the project, never raw user text)."""
    safe = "".join(c for c in filename if c.isascii() and (c.isalnum() or c in "-_.")).lstrip(".") or "clip.mp4"
    return f'attachment; filename="{safe}"'
