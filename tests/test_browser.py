"""The demo page in a real browser: headless Chromium (Debian's package) driven by Playwright, against the
API and a worker on loopback. Click "Download clip", see progress, get a playable mp4."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mediacheck import streams

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = pytest.mark.slow


@pytest.fixture
def chromium() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing: .ci/run installs Debian's chromium package")
        pytest.skip("Chromium is not installed (apt-get install chromium); the browser test runs in CI")
    return CHROMIUM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(workers, queue_env, tmp_path) -> Iterator[str]:
    """``quoteclip serve`` and ``quoteclip worker`` as real processes on loopback."""
    port = _free_port()
    env = workers.full_env()
    api = subprocess.Popen([sys.executable, "-m", "quoteclip", "serve", "--port", str(port)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    worker = workers.start(burst=False)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1).read()
            break
        except OSError:
            time.sleep(0.2)
    try:
        yield base
    finally:
        for proc in (api, worker):
            proc.terminate()
        for proc in (api, worker):
            proc.wait(timeout=30)
        if worker.stdout:
            worker.stdout.close()


def test_download_button_in_chromium(chromium, served, media, http_source, tmp_path) -> None:
    from playwright.sync_api import sync_playwright

    (http_source.root / "ep.mp4").symlink_to(media(size="640x360", duration=8, gop=60))
    page_url = f"{served}/?source={http_source.url('ep.mp4')}&start=1&end=6&brand=StarZero"
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
        browser = p.chromium.launch(executable_path=chromium, args=flags)
        try:
            page = browser.new_page(accept_downloads=True)
            page.goto(page_url)
            assert page.inner_text("#times") == "1–6"
            stages: list[str] = []
            console: list[str] = []
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            with page.expect_download(timeout=120_000) as download_info:
                page.click("#download")
                page.wait_for_function("document.getElementById('stage').textContent !== 'ready'")
                stages.append(page.inner_text("#stage"))
            download = download_info.value
            saved = tmp_path / "clip.mp4"
            download.save_as(saved)
            page.wait_for_function("document.getElementById('player').readyState >= 1", timeout=30_000)
            assert page.inner_text("#stage") == "finished"
            duration = page.evaluate("document.getElementById('player').duration")
            page.screenshot(path=str(ARTIFACTS / "demo-page.png"), full_page=True)
        finally:
            browser.close()
    info = streams(saved)
    assert (info["vcodec"], info["width"], info["height"]) == ("h264", 1280, 720)
    assert abs(info["duration"] - 5.0) < 0.1 and abs(duration - 5.0) < 0.1
    assert stages and (stages[0] in {"queued", "finished"} or stages[0].startswith(("fetching", "rendering")))
    assert not [line for line in console if line.startswith("error")], console
