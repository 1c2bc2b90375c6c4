"""The S3 store against a real SeaweedFS: what it stores comes back, a missing object is "not there", and every
failure of boto3 becomes one StorageFailed saying what was being done (the queue retries it)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from quoteclip.errors import StorageFailed
from quoteclip.settings import Settings
from storage.s3 import S3Storage


def _store(s3, **changes: str) -> S3Storage:
    settings = Settings(
        s3_endpoint=changes.get("endpoint", s3.endpoint),
        s3_bucket=changes.get("bucket", s3.bucket),
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=changes.get("secret", s3.secret_key),
    )
    return S3Storage.from_settings(settings)


def test_stored_objects_come_back_and_missing_ones_are_not_there(s3, tmp_path: Path) -> None:
    store = _store(s3)
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\0\0\0\x18ftypmp42" + bytes(range(256)) * 8)
    assert store.stat("k1") is None and store.get_asset("a.png") is None
    store.put(clip, "k1", "a-clip.mp4", {"renderer": "test"})
    store.put_asset("a.png", b"png bytes", "image/png")
    assert store.stat("k1") == {"renderer": "test"}
    assert store.read("k1").read() == clip.read_bytes()
    assert store.get_asset("a.png") == b"png bytes"
    assert "clips/k1.mp4" in store.link("k1")
    assert not store.has_sidecar("k2", ".jpg")
    store.put_sidecar("k2", ".jpg", b"poster", "image/jpeg")  # a poster rendered alone: no mp4 beside it
    assert store.has_sidecar("k2", ".jpg") and store.stat("k2") is None


def test_every_store_failure_is_one_storage_error_naming_what_was_done(s3, tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"x" * 100)
    denied = _store(s3, secret="not-the-secret")  # every call refused (403)
    calls = {
        "could not look up clips/k.mp4 in bucket quoteclip-test": lambda: denied.stat("k"),
        "could not read asset a.png from bucket quoteclip-test": lambda: denied.get_asset("a.png"),
        "could not read clips/k.mp4 from bucket quoteclip-test": lambda: denied.read("k"),
        "upload of clips/k.mp4 to bucket quoteclip-test failed": lambda: denied.put(clip, "k", "k.mp4", {}),
        "upload of assets/a.png to bucket quoteclip-test failed": lambda: denied.put_asset("a.png", b"x", "image/png"),
    }
    for doing, call in calls.items():
        with pytest.raises(StorageFailed) as failed:
            call()
        assert str(failed.value).startswith(f"{doing}: "), str(failed.value)

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    down = _store(s3, endpoint=f"http://127.0.0.1:{port}")
    down.client.meta.config.retries = {"max_attempts": 1}
    with pytest.raises(StorageFailed) as failed:
        down.stat("k")
    assert str(failed.value).startswith(
        "could not look up clips/k.mp4 in bucket quoteclip-test: object store unreachable"
    )
