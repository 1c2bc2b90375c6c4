"""``quoteclip check CLIP``: a clip's quality report (renderer/qa.py), on clips this test makes: a cut 120 ms into a
word is reported with its word and by how much, a 3 s black stretch is reported where it is, a clip over its
platform's true-peak limit is reported; a clean clip reports nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import run_cli

from quoteclip.media import ffmpeg_quiet, lavfi


def make(path: Path, ffmpeg_bin: str, picture: str, sound: str) -> Path:
    subprocess.run(
        [
            *ffmpeg_quiet(ffmpeg_bin),
            *lavfi(picture, sound),
            *("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path)),
        ],
        check=True,
        timeout=60,
    )
    return path


def test_a_cut_into_a_word_is_reported_with_the_word_and_by_how_much(media, tmp_path) -> None:
    source = media(size="320x180", duration=6, gop=30)
    words = tmp_path / "words.json"
    words.write_text(
        json.dumps([{"text": "hello", "start": 0.88, "end": 1.5}, {"text": "world", "start": 1.6, "end": 2.4}])
    )
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")}
    made = run_cli(
        *("render", str(source), "--start", "1.0", "--end", "2.4", "--caption", "hello world"),
        *("--transcript", str(words), "--quality", "preview", "--json"),
        env=env,
    )
    assert made.returncode == 0, made.stderr
    clip = json.loads(made.stdout)["path"]
    done = run_cli("check", clip, "--transcript", str(words), "--json", env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    findings = json.loads(done.stdout)["findings"]
    cut = [f for f in findings if f["kind"] == "cut inside a word"]
    assert cut == [
        {
            "kind": "cut inside a word",
            "said": "the clip starts 120 ms into the word 'hello' (0.88-1.5 s)",
            "end": "start",
            "word": "hello",
            "by": 0.12,
        }
    ], findings


def test_black_and_a_true_peak_over_the_platforms_are_reported(tmp_path, ffmpeg_bin) -> None:
    black = make(
        tmp_path / "black.mp4",
        ffmpeg_bin,
        "color=c=black:s=320x180:r=25:d=3[b];testsrc2=s=320x180:r=25:d=2[t];[b][t]concat=n=2:v=1:a=0",
        "sine=f=440:d=5,volume=-20dB",
    )
    done = run_cli("check", str(black), "--json")
    assert done.returncode == 1, done.stderr
    kinds = {f["kind"]: f for f in json.loads(done.stdout)["findings"]}
    assert kinds["black"]["at"][0] == 0 and 2.9 <= kinds["black"]["at"][1] <= 3.1, kinds
    loud = make(tmp_path / "loud.mp4", ffmpeg_bin, "testsrc2=s=320x180:r=25:d=4", "aevalsrc='sgn(sin(2*PI*440*t))':d=4")
    done = run_cli("check", str(loud), "--platform", "shorts", "--json")
    assert done.returncode == 1, done.stderr
    kinds = {f["kind"]: f for f in json.loads(done.stdout)["findings"]}
    assert "true peak" in kinds and kinds["true peak"]["by"] > 0, kinds
    assert "loudness" in kinds, kinds  # a full-scale square wave is far above -14 LUFS
    clean = make(tmp_path / "clean.mp4", ffmpeg_bin, "testsrc2=s=320x180:r=25:d=4", "sine=f=440:d=4,volume=-20dB")
    done = run_cli("check", str(clean))
    assert done.returncode == 0 and done.stdout.strip() == "nothing found", (done.stdout, done.stderr)
    missing = run_cli("check", str(tmp_path / "none.mp4"))
    assert missing.returncode == 2 and "clip: not a file" in missing.stderr
