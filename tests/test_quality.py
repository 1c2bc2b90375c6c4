"""A clip's quality report in its manifest, and ``snap: words``: a clip cut 120 ms into a word is reported as such
in its manifest (made once the clip is stored, inline and by a queue worker); ``--snap words`` moves the cut to the
word's start (the word times, and the decoded sound: the word's first tone is the clip's first sound) and says by
how much; a signed link and an API request snap the same way."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from quoteclip.media import ffmpeg_quiet, lavfi
from quoteclip.spec import build_spec, snap_cut

# a tone with no sound from 1.5 s to 3.8 s
SILENT_SOUND = "aevalsrc='if(between(t,1.5,3.8),0,0.3*sin(2*PI*440*t))':s=48000:d=6"
WORDS = [{"text": "hello", "start": 0.88, "end": 1.5}, {"text": "world", "start": 1.6, "end": 2.4}]


def source(path: Path, ffmpeg_bin: str) -> Path:
    """4 s: a 440 Hz tone for the word's first 120 ms (0.88–1.0 s), 880 Hz after it, silence before."""
    sound = "aevalsrc='if(lt(t,0.88),0,if(lt(t,1.0),0.3*sin(2*PI*440*t),0.3*sin(2*PI*880*t)))':s=48000:d=4"
    subprocess.run(
        [
            *ffmpeg_quiet(ffmpeg_bin),
            *lavfi("testsrc2=s=320x180:r=25:d=4", sound),
            *("-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-pix_fmt", "yuv420p", "-c:a", "aac"),
            *("-shortest", str(path)),
        ],
        check=True,
        timeout=60,
    )
    return path


def first_tone(clip: str, ffmpeg_bin: str) -> float:
    """The frequency of the clip's sound from 10 to 90 ms (past the AAC start), by zero crossings."""
    pcm = subprocess.run(
        [*ffmpeg_quiet(ffmpeg_bin), "-i", clip, "-vn", "-ac", "1", "-ar", "48000", "-f", "f32le", "-"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    samples = np.frombuffer(pcm, dtype="<f4")[480:4320]
    crossings = np.count_nonzero(np.diff(np.signbit(samples)))
    return crossings / 2 / 0.08


def render(tmp_path: Path, clip_source: Path, *extra: str) -> dict:
    words = tmp_path / "words.json"
    words.write_text(json.dumps(WORDS))
    made = run_cli(
        *("render", str(clip_source), "--start", "1.0", "--end", "2.4", "--caption", "hello world"),
        *("--transcript", str(words), "--quality", "preview", "--no-fades", "--json", *extra),
        env={"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")},
    )
    assert made.returncode == 0, made.stderr
    return dict(json.loads(made.stdout))


def manifest(clip: str) -> dict:
    return dict(json.loads(Path(clip).with_suffix(".manifest.json").read_text()))


def test_a_cut_into_a_word_is_in_the_manifest_and_snap_words_moves_it_to_the_word(tmp_path, ffmpeg_bin) -> None:
    clip_source = source(tmp_path / "source.mp4", ffmpeg_bin)
    cut = render(tmp_path, clip_source)
    report = manifest(cut["path"])["qa"]
    inside = [f for f in report["findings"] if f["kind"] == "cut inside a word"]
    assert [(f["end"], f["word"], f["by"]) for f in inside] == [("start", "hello", 0.12)], report
    assert report["measured"]["loudness"]["integrated"] < 0, report
    assert 800 <= first_tone(cut["path"], ffmpeg_bin) <= 960  # cut into the word: its first tone is gone

    snapped = render(tmp_path, clip_source, "--snap", "words")
    assert snapped["key"] != cut["key"]
    assert any("snap: the start moved 120 ms earlier" in w for w in snapped["warnings"]), snapped
    fixed = manifest(snapped["path"])
    assert fixed["quote"] == {"start": 0.88, "end": 2.4}, fixed["quote"]
    assert "snap" not in fixed["spec"] and "snapped" not in fixed["spec"]
    assert not [f for f in fixed["qa"]["findings"] if f["kind"] == "cut inside a word"], fixed["qa"]
    assert 400 <= first_tone(snapped["path"], ffmpeg_bin) <= 480  # the word's own first tone opens the clip

    # the same clip asked at the word's start without snapping: one clip, one key
    same = run_cli(
        *("render", str(clip_source), "--start", "0.88", "--end", "2.4", "--caption", "hello world"),
        *("--transcript", str(tmp_path / "words.json"), "--quality", "preview", "--no-fades", "--json"),
        env={"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")},
    )
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["key"] == snapped["key"]


def test_snap_needs_words_and_names_its_one_kind() -> None:
    for data, said in (
        ({"snap": "words"}, "snap: words moves the cut's ends to word boundaries, so it needs the quote's words"),
        ({"snap": "frames", "words": WORDS}, "snap: words is the one snap there is"),
    ):
        try:
            build_spec({"source": "a.mp4", "start": 1.0, "end": 2.4, **data})
        except Exception as exc:  # noqa: BLE001
            assert said in str(exc), exc
        else:
            raise AssertionError(f"{data} was taken")


def test_snap_cut_moves_each_end_to_the_nearer_boundary_of_its_word() -> None:
    from quoteclip.spec import Word

    words = [Word(w["text"], w["start"], w["end"]) for w in WORDS]
    assert snap_cut(1.0, 2.4, words) == (0.88, 2.4)  # 120 ms into hello: back to its start
    assert snap_cut(1.4, 2.1, words) == (1.5, 2.4)  # 100 ms before hello's end: after it; 300 ms before world's end
    assert snap_cut(1.55, 1.58, words) == (1.55, 1.58)  # between words: as it is
    assert snap_cut(1.0, 1.1, words) == (0.88, 1.5)  # the nearer boundaries would leave nothing: the word kept


def test_a_queued_clip_has_its_report_and_the_api_and_a_signed_link_snap(
    tmp_path, ffmpeg_bin, http_source, queue_env, workers
) -> None:
    """Through the API and a queue worker: ``snap: words`` with the quote's words moves the cut and says so; the
    stored clip's manifest gets its report once stored (GET /clips/{id}/report answers it); ``quoteclip sign
    --snap words`` signs the snapped times."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from quoteclip.settings import Settings

    source(http_source.root / "ep.mp4", ffmpeg_bin)
    url = http_source.url("ep.mp4")
    client = TestClient(create_app(Settings.from_env(queue_env)))
    body = {"source": url, "start": 1.0, "end": 2.4, "caption": "hello world", "quality": "preview", "fades": False}
    asked = client.post("/clips", json={**body, "words": WORDS, "snap": "words"})
    assert asked.status_code == 202, asked.text
    assert any("snap: the start moved 120 ms earlier" in w for w in asked.json()["warnings"]), asked.json()
    plain = client.post("/clips", json={**body, "start": 0.88, "words": WORDS})
    assert plain.json()["id"] == asked.json()["id"]  # the snapped clip is the clip asked at the word's start
    unsnapped = client.post("/clips", json={**body, "words": WORDS})
    assert unsnapped.json()["id"] != asked.json()["id"]
    refused = client.post("/clips", json={**body, "snap": "words"})
    assert refused.status_code == 422 and "needs the quote's words" in refused.text, refused.text

    workers.burst(1)
    for job, cut_into in ((asked.json()["id"], False), (unsnapped.json()["id"], True)):
        assert client.get(f"/clips/{job}").json()["status"] == "finished"
        stored = manifest(str(Path(queue_env["QUOTECLIP_STORAGE_DIR"]) / f"{job.removeprefix('clip-')}.mp4"))
        assert "qa" in stored  # made by the worker once the clip was stored (before any route asked)
        report = client.get(f"/clips/{job}/report").json()
        kinds = [f["kind"] for f in report["findings"]]
        assert ("cut inside a word" in kinds) == cut_into, report
        assert stored["qa"] == report
    assert client.get("/clips/clip-" + "0" * 32 + "/report").status_code == 404

    words = tmp_path / "words.json"
    words.write_text(json.dumps(WORDS))
    signing = {**queue_env, "QUOTECLIP_SITE_KEYS": "quotes:" + "s" * 32}
    signed = run_cli(
        *("sign", url, "--start", "1.0", "--end", "2.4", "--site", "quotes", "--no-check", "--json"),
        *("--caption", "hello world", "--snap", "words", "--transcript", str(words)),
        env=signing,
    )
    assert signed.returncode == 0, signed.stderr
    assert "snap: the start moved 120 ms earlier" in signed.stderr
    at_word = run_cli(
        *("sign", url, "--start", "0.88", "--end", "2.4", "--site", "quotes", "--no-check", "--json"),
        *("--caption", "hello world"),
        env=signing,
    )
    assert json.loads(signed.stdout)["link"] == json.loads(at_word.stdout)["link"]
    alone = run_cli(
        *("sign", url, "--start", "1.0", "--end", "2.4", "--site", "quotes", "--snap", "words"), env=signing
    )
    assert alone.returncode == 2 and "--snap words and --transcript go together" in alone.stderr


def test_a_caption_line_wider_than_the_frame_is_reported_in_the_manifest(tmp_path, ffmpeg_bin) -> None:
    """A word too long to wrap, in large vertical captions: the clip's report names the line cut off."""
    clip_source = source(tmp_path / "source.mp4", ffmpeg_bin)
    word = "Pneumonoultramicroscopicsilicovolcanoconiosis"
    made = run_cli(
        *("render", str(clip_source), "--start", "1.0", "--end", "2.4", "--caption", f"a {word}"),
        *("--profile", "vertical", "--caption-size", "0.1", "--quality", "preview", "--json"),
        env={"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips")},
    )
    assert made.returncode == 0, made.stderr
    findings = manifest(json.loads(made.stdout)["path"])["qa"]["findings"]
    cut_off = [f for f in findings if f["kind"] == "caption cut off"]
    assert len(cut_off) == 1 and word[:20] in cut_off[0]["said"] and cut_off[0]["by"] > 0, findings


def test_a_caption_line_past_a_platforms_side_margins_is_reported() -> None:
    """A line inside the frame but reaching into the margins a platform keeps clear at its sides (its right_safe,
    the lines centred) is its own finding; one inside them is none."""
    from quoteclip.spec import CaptionStyle, Word
    from renderer.captions import caption_track
    from renderer.qa import Report, caption_fit

    style = CaptionStyle(right_safe=0.2)
    kinds = {}
    for n in range(4, 40):
        track = caption_track([Word("W" * n, 0.0, 1.0)], (720, 1280), "vertical", 0.05, style, None, False, 1.0)
        assert track is not None
        report = Report()
        caption_fit(track, report)
        reach = track.line_reach()[0][2]
        kinds[n] = ([f["kind"] for f in report.findings], reach)
    inside = [n for n, (found, reach) in kinds.items() if reach <= 720 * 0.3]
    between = [n for n, (found, reach) in kinds.items() if 720 * 0.3 < reach <= 360]
    assert inside and between, kinds
    assert all(kinds[n][0] == [] for n in inside), kinds
    assert all(kinds[n][0] == ["caption outside the safe area"] for n in between), kinds


def test_post_links_snaps_a_link_to_the_words_given(queue_env) -> None:
    """``POST /links`` with ``snap: words`` and the quote's words signs the snapped times (the link for the word's
    start), says what moved, and refuses a snap without words."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from quoteclip.settings import Settings

    env = {**queue_env, "QUOTECLIP_SITE_KEYS": "quotes:" + "s" * 32, "QUOTECLIP_API_KEYS": "k" * 32}
    client = TestClient(create_app(Settings.from_env(env)), headers={"X-API-Key": "k" * 32})
    body = {"site": "quotes", "source": "http://127.0.0.1:9/ep.mp4", "start": 1.0, "end": 2.4}
    snapped = client.post("/links", json={**body, "snap": "words", "words": WORDS})
    assert snapped.status_code == 200, snapped.text
    assert any("snap: the start moved 120 ms earlier" in w for w in snapped.json()["warnings"]), snapped.json()
    at_word = client.post("/links", json={**body, "start": 0.88})
    assert snapped.json()["link"] == at_word.json()["link"]
    refused = client.post("/links", json={**body, "snap": "words"})
    assert refused.status_code == 422 and "needs the quote's words" in refused.text, refused.text
    late = client.post("/links", json={**body, "end": 90000, "snap": "words", "words": WORDS})
    assert late.status_code == 422 and "past 24 hours" in late.text, late.text
    backwards = client.post("/links", json={**body, "start": 2.4, "end": 1.0, "snap": "words", "words": WORDS})
    assert backwards.status_code == 422 and "end must be after start" in backwards.text, backwards.text
    between = client.post("/links", json={**body, "start": 1.55, "snap": "words", "words": WORDS})
    assert between.status_code == 200, between.text  # between words: as it is
    assert not [w for w in between.json()["warnings"] if w.startswith("snap")], between.json()


def test_check_reports_black_frozen_and_silent_stretches_where_they_are(tmp_path, ffmpeg_bin) -> None:
    """``quoteclip check`` on a clip with a second of black picture at its start, a picture frozen from 2.0 s to
    4.5 s and no sound from 1.5 s to 3.8 s: each is a finding of its kind, at its place (within a frame or two),
    and nothing else is; exit 1."""
    clip = tmp_path / "flawed.mp4"
    black = "drawbox=c=black:t=fill:enable='lt(t,1)'"
    frozen = "split[a][b];[a][b]freezeframes=first=50:last=112:replace=50"  # (frames 50-112 shown as frame 50)
    picture = f"testsrc2=s=320x180:r=25:d=6,{black},{frozen}"
    subprocess.run(
        [
            *ffmpeg_quiet(ffmpeg_bin),
            *lavfi(picture, SILENT_SOUND),
            # (lossless: a lossy encoder goes on refining a still picture for a few frames, which moves the freeze)
            *("-c:v", "libx264", "-preset", "ultrafast", "-qp", "0", "-pix_fmt", "yuv420p"),
            *("-c:a", "aac", "-shortest", str(clip)),
        ],
        check=True,
        timeout=60,
    )
    checked = run_cli("check", str(clip), "--json")
    assert checked.returncode == 1, checked.stderr
    found = json.loads(checked.stdout)["findings"]
    at = {f["kind"]: f["at"] for f in found}
    assert sorted(at) == ["black", "frozen", "silence"] and len(found) == 3, found
    assert at["black"] == pytest.approx([0.0, 1.0], abs=0.09), found
    assert at["frozen"] == pytest.approx([2.0, 4.5], abs=0.09), found
    assert at["silence"] == pytest.approx([1.5, 3.8], abs=0.05), found
    assert [f["said"] for f in found if f["kind"] == "frozen"] == [
        f"frozen from {at['frozen'][0]:.2f} s to {at['frozen'][1]:.2f} s"
    ]


def test_a_rendered_clips_report_reads_its_picture_in_the_render_and_only_its_sound_after(tmp_path, ffmpeg_bin) -> None:
    """A clip's report made as it is rendered: black (a second, not a 0.28 s blink), frozen and silent stretches
    found where they are, the same findings and measures ``quoteclip check`` makes of the stored clip; the picture's
    detectors ran in the render's own pass, and the one pass after it read the clip's sound alone (no second decode
    of the picture)."""
    flawed = tmp_path / "flawed.mp4"
    black = "drawbox=c=black:t=fill:enable='lt(t,1)+between(t,5,5.28)'"
    frozen = "split[a][b];[a][b]freezeframes=first=50:last=112:replace=50"  # (frames 50-112 shown as frame 50)
    subprocess.run(
        [
            *ffmpeg_quiet(ffmpeg_bin),
            *lavfi(f"testsrc2=s=320x180:r=25:d=6,{black},{frozen}", SILENT_SOUND),
            *("-c:v", "libx264", "-preset", "ultrafast", "-qp", "0", "-pix_fmt", "yuv420p"),
            *("-c:a", "aac", "-shortest", str(flawed)),
        ],
        check=True,
        timeout=60,
    )
    argv_log = tmp_path / "ffmpeg-args.log"
    wrapper = tmp_path / "ffmpeg-logging"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{argv_log}"\nexec "{ffmpeg_bin}" "$@"\n')
    wrapper.chmod(0o755)
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": str(wrapper)}
    made = run_cli("render", str(flawed), "--start", "0", "--end", "6", "--json", env=env)
    assert made.returncode == 0, made.stderr
    clip = json.loads(made.stdout)["path"]
    report = manifest(clip)["qa"]
    runs = [run for run in argv_log.read_text().splitlines() if " -version" not in run]
    renders = [n for n, run in enumerate(runs) if str(flawed) in run and "-filter_complex" in run]
    assert len(renders) == 1 and "blackdetect=" in runs[renders[0]] and "freezedetect=" in runs[renders[0]], runs
    after = runs[renders[0] + 1 :]
    assert len(after) == 1 and " -vn " in after[0] and "ebur128" in after[0], after  # its sound read back alone
    assert "blackdetect" not in after[0], after

    at = {f["kind"]: f["at"] for f in report["findings"]}
    assert sorted(at) == ["black", "frozen", "silence"] and len(report["findings"]) == 3, report
    assert at["black"] == pytest.approx([0.0, 1.0], abs=0.05), report
    assert at["frozen"] == pytest.approx([2.0, 4.5], abs=0.09), report
    assert at["silence"] == pytest.approx([1.5, 3.8], abs=0.05), report
    checked = run_cli("check", clip, "--json")
    assert checked.returncode == 1, checked.stderr
    again = json.loads(checked.stdout)
    assert [f["kind"] for f in again["findings"]] == ["black", "frozen", "silence"], again
    for finding in again["findings"]:
        assert finding["at"] == pytest.approx(at[finding["kind"]], abs=0.09), (finding, report)
    assert again["measured"] == report["measured"], (again, report)


def test_a_black_stretch_open_at_the_clips_end_ends_at_its_last_frame_and_silence_has_no_infinite_peak() -> None:
    """What a render's picture detectors printed: a black stretch still open when the clip ends lasts to its last
    frame (as blackdetect's own log has it), not to the end of a longer sound; a silent clip's true peak (-inf in
    ffmpeg's summary) is null in the report, which is JSON."""
    from renderer.qa import Report, Seen, read, read_picture

    marks = "frame:63   pts:64512   pts_time:2.52\nlavfi.black_start=2.52\n"
    short, longer = Report(), Report()
    read_picture(Seen(marks, last_frame=2.96), 3.04, short)  # 0.44 s of black to its last frame
    read_picture(Seen(marks, last_frame=3.2), 3.24, longer)
    assert short.findings == [] and [f["at"] for f in longer.findings] == [[2.52, 3.2]], (short, longer)

    summary = "[Parsed_ebur128_1 @ 0x1] Summary:\n  Integrated loudness:\n    I:         -70.0 LUFS\n"
    summary += "  True peak:\n    Peak:       -inf dBFS\n"
    silent = Report()
    read(summary, 3.0, silent, -14.0, -1.0, picture=False)
    assert silent.measured == {"loudness": {"integrated": -70.0, "true_peak": None}}, silent
    assert json.loads(json.dumps(silent.to_json(), allow_nan=False))["measured"] == silent.measured


def test_a_silent_sources_clip_black_to_its_end_is_reported_to_its_last_frame_with_no_pass_after(
    tmp_path, ffmpeg_bin
) -> None:
    """A clip of a source without sound whose last 0.6 s are black: its report (made in the render, no pass after
    it: its silent track is not checked) says black to its last frame, as ``quoteclip check`` of the stored clip
    says; a clip whose last 0.44 s are black has no finding."""
    argv_log = tmp_path / "ffmpeg-args.log"
    wrapper = tmp_path / "ffmpeg-logging"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{argv_log}"\nexec "{ffmpeg_bin}" "$@"\n')
    wrapper.chmod(0o755)
    env = {"QUOTECLIP_STORAGE_DIR": str(tmp_path / "clips"), "FFMPEG_BINARY": str(wrapper)}
    for black_from, found in ((3.4, True), (3.56, False)):
        dark = tmp_path / f"dark-{black_from}.mp4"
        picture = f"testsrc2=s=320x180:r=25:d=4,drawbox=c=black:t=fill:enable='gte(t,{black_from})'"
        subprocess.run(
            [*ffmpeg_quiet(ffmpeg_bin), "-f", "lavfi", "-i", picture, "-c:v", "libx264", "-preset", "ultrafast"]
            + ["-qp", "0", "-pix_fmt", "yuv420p", str(dark)],
            check=True,
            timeout=60,
        )
        argv_log.unlink(missing_ok=True)
        made = run_cli("render", str(dark), "--start", "0", "--end", "4", "--json", env=env)
        assert made.returncode == 0, made.stderr
        clip = json.loads(made.stdout)["path"]
        runs = [run for run in argv_log.read_text().splitlines() if " -version" not in run]
        assert str(dark) in runs[-1] and "-filter_complex" in runs[-1], runs  # no pass after the render
        black = [f["at"] for f in manifest(clip)["qa"]["findings"] if f["kind"] == "black"]
        checked = json.loads(run_cli("check", clip, "--json").stdout)
        assert [f["at"] for f in checked["findings"] if f["kind"] == "black"] == black, (checked, black)
        assert black == ([[black_from, 3.96]] if found else []), black  # (the last of 100 frames at 25 fps)
