"""Brand files through the API and the queue: no path on a worker's disk is ever read for a request; logos and
fonts are uploaded (by content hash) or the operator's brand files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_cli
from fastapi.testclient import TestClient
from mediacheck import rgb_frame
from PIL import Image

from api import create_app
from quoteclip.fonts import default_font_path
from quoteclip.settings import Settings


def red_png(path, size=(96, 96)) -> bytes:  # type: ignore[no-untyped-def]
    Image.new("RGBA", size, (255, 0, 0, 255)).save(path)
    return path.read_bytes()


@pytest.fixture
def client(queue_env: dict[str, str]) -> TestClient:
    queue_env["QUOTECLIP_ALLOW_LOCAL_SOURCES"] = ""
    return TestClient(create_app(Settings.from_env(queue_env)))


@pytest.fixture
def source_url(media, http_source) -> str:  # type: ignore[no-untyped-def]
    (http_source.root / "ep.mp4").symlink_to(media(size="640x360", duration=4, gop=60))
    return http_source.url("ep.mp4")


def test_paths_on_the_server_are_never_read_for_a_request(client, source_url, tmp_path) -> None:
    """Whether the file exists or not, the answer is the same refusal: nothing tells which files exist."""
    private = tmp_path / "private.png"
    red_png(private)
    answers = []
    for body in (
        {"watermark": {"logo": str(private)}},
        {"watermark": {"logo": str(tmp_path / "nope.png")}},
        {"font": "/usr/share/fonts/secret.ttf"},
        {"font": str(default_font_path())},
    ):
        response = client.post("/clips", json={"source": source_url, "start": 1, "end": 2, **body})
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert "local paths are not allowed here" in detail
        answers.append(detail.split(", got")[0])
    assert len(set(answers)) == 2  # one wording for logos, one for fonts: existence never shows


def test_uploaded_logo_and_font_are_used_by_the_worker(client, source_url, tmp_path, workers, queue_env) -> None:
    logo = client.post("/assets", content=red_png(tmp_path / "logo.png"))
    assert logo.status_code == 201, logo.text
    assert logo.json()["id"].startswith("asset:") and logo.json()["id"].endswith(".png")
    font = client.post("/assets", content=default_font_path().read_bytes())
    assert font.status_code == 201 and font.json()["id"].endswith((".ttf", ".otf"))
    job = client.post(
        "/clips",
        json={
            "source": source_url,
            "start": 1,
            "end": 2,
            "caption": "hello",
            "font": font.json()["id"],
            "watermark": {"logo": logo.json()["id"], "position": "top-right"},
        },
    )
    assert job.status_code == 202, job.text
    workers.burst(1)
    status = client.get(f"/clips/{job.json()['id']}").json()
    assert status["status"] == "finished", status
    key = job.json()["id"].removeprefix("clip-")
    frame = rgb_frame(Settings.from_env(queue_env).storage_dir / f"{key}.mp4", 0.5)
    corner = frame[10:120, 1100:1275].reshape(-1, 3)
    red = (corner[:, 0] > 180) & (corner[:, 1] < 90) & (corner[:, 2] < 90)
    assert red.sum() > 500  # the uploaded logo is in the corner


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not an image", "only PNG logos and TrueType/OpenType fonts"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, "not a readable PNG image"),
        (b"OTTO" + b"\x00" * 100, "not a readable TrueType/OpenType font"),
    ],
)
def test_bad_uploads_are_refused(client, data: bytes, message: str) -> None:
    response = client.post("/assets", content=data)
    assert response.status_code == 422 and message in response.json()["detail"], response.text


def png_with(kind: bytes, body: bytes) -> bytes:
    """A sound 8×8 PNG with one more chunk, of ``kind`` and ``body``, after its pixels."""
    import io
    import struct
    import zlib

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGBA", (8, 8), (1, 2, 3, 255)).save(out, "PNG")
    png = out.getvalue()
    chunk = struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return png[:-12] + chunk + png[-12:]  # before IEND


def test_a_png_whose_text_inflates_past_the_renderers_limit_is_refused_at_upload(client) -> None:
    """A zTXt (or compressed iTXt, or iCCP) chunk of 20 MB of zeros in 20 KB: the upload's check once passed it
    (only checksums are verified) and every render using the logo then failed as an internal error."""
    import zlib

    bomb = zlib.compress(b"\0" * (20 * 1024**2), 9)
    for kind, body in (
        (b"zTXt", b"Comment\0\0" + bomb),
        (b"iTXt", b"Comment\0\1\0en\0Kommentar\0" + bomb),
        (b"iCCP", b"icc\0\0" + bomb),
    ):
        response = client.post("/assets", content=png_with(kind, body))
        assert response.status_code == 422, (kind, response.text)
        assert f"{kind.decode()} chunk inflates past 1 MB" in response.json()["detail"], response.text
    small = client.post("/assets", content=png_with(b"zTXt", b"Comment\0\0" + zlib.compress(b"made with care")))
    assert small.status_code == 201, small.text


def test_uploads_are_capped(client, tmp_path) -> None:
    big = client.post("/assets", content=red_png(tmp_path / "big.png", (5000, 10)))
    assert big.status_code == 422 and "at most 4096 px a side" in big.json()["detail"]
    assert client.post("/assets", content=b"x" * (25 * 1024**2)).status_code == 413
    unknown = client.post(
        "/clips",
        json={
            "source": "http://127.0.0.1/x.mp4",
            "start": 1,
            "end": 2,
            "watermark": {"logo": "asset:" + "0" * 64 + ".png"},
        },
    )
    assert unknown.status_code == 202  # accepted; the worker then fails it naming the missing asset


def test_operator_brand_files_by_name(queue_env, source_url, tmp_path, workers) -> None:
    brand = tmp_path / "brand"
    brand.mkdir()
    red_png(brand / "starzero.png")
    queue_env.update(QUOTECLIP_BRAND_DIR=str(brand), QUOTECLIP_ALLOW_LOCAL_SOURCES="")
    workers.env = queue_env
    client = TestClient(create_app(Settings.from_env(queue_env)))
    ok = client.post(
        "/clips", json={"source": source_url, "start": 1, "end": 2, "watermark": {"logo": "brand:starzero.png"}}
    )
    missing = client.post(
        "/clips", json={"source": source_url, "start": 2, "end": 3, "watermark": {"logo": "brand:other.png"}}
    )
    assert ok.status_code == 202
    assert missing.status_code == 422 and "no brand file named 'other.png'" in missing.json()["detail"]
    workers.burst(1)
    assert client.get(f"/clips/{ok.json()['id']}").json()["status"] == "finished"


def test_cli_enqueue_uploads_local_files_first(queue_env, source_url, tmp_path, workers) -> None:
    logo = tmp_path / "mine.png"
    red_png(logo)
    env = {**queue_env, "QUOTECLIP_ALLOW_LOCAL_SOURCES": ""}
    done = run_cli("enqueue", source_url, "--start", "1", "--end", "2", "--watermark", str(logo), "--json", env=env)
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["job_id"]
    workers.env = env
    workers.burst(1)
    shown = run_cli("status", job_id, "--json", env=env)
    assert json.loads(shown.stdout)["status"] == "finished", shown.stdout
    stored = list((Settings.from_env(queue_env).storage_dir / "assets").glob("*.png"))
    assert len(stored) == 1 and stored[0].read_bytes() == logo.read_bytes()
    assert np.array_equal(np.asarray(Image.open(stored[0])), np.asarray(Image.open(logo)))
