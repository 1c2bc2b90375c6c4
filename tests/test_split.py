"""A long clip rendered in pieces (renderer/split.py, jobs/pieces.py): the same frames and sound as one piece, the
same key and link, pieces shared out to real workers, a worker killed mid-piece costing that piece only, and no
piece left behind."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import av
import numpy as np
import pytest
import redis
from conftest import REPORT_PASS, Workers
from mediacheck import frame_index, frame_means

from jobs.pieces import splits
from jobs.pipeline.produce import produce_clip
from jobs.queue import enqueue_clip, job_status
from quoteclip.settings import Settings
from quoteclip.spec import build_spec
from renderer.frames import frame_span
from renderer.plan import source_rate
from renderer.probe import probe
from renderer.render import render_clips
from renderer.split import join_pieces, plan_pieces, plan_split, render_piece, render_sound
from storage import LocalStorage

WORDS = " ".join(f"word{n}" for n in range(40))


def _spec(src: Path, start: float, end: float, **more: object):
    return build_spec(
        {"source": str(src), "start": start, "end": end, "caption": WORDS, "encoder_preset": "ultrafast", **more}
    )


def _pcm(path: Path) -> np.ndarray:
    with av.open(str(path)) as c:
        return np.concatenate([f.to_ndarray() for f in c.decode(audio=0)], axis=1)


def _frames(path: Path, wanted: set[int]) -> dict[int, tuple[float, np.ndarray]]:
    out = {}
    with av.open(str(path)) as c:
        for n, frame in enumerate(c.decode(video=0)):
            if n in wanted:
                out[n] = (float(frame.pts * frame.time_base), frame.to_ndarray(format="rgb24").astype(float))
    return out


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a - b) ** 2).mean())
    return 99.0 if mse == 0 else 10 * float(np.log10(255**2 / mse))


def _starts(path: Path) -> dict[str, float]:
    with av.open(str(path)) as c:
        return {s.type: float((s.start_time or 0) * s.time_base) for s in c.streams}


def test_pieces_are_planned_on_the_frame_grid_in_equal_lengths() -> None:
    pieces = plan_pieces(5394, 29.97, 15.0)
    assert len(pieces) == 12 and sum(p.count for p in pieces) == 5394
    assert {p.count for p in pieces} <= {449, 450}
    assert all(b.first == a.first + a.count for a, b in zip(pieces, pieces[1:], strict=False))
    assert plan_pieces(100, 30, 15.0) == plan_pieces(100, 30, 60.0)[:1]  # one piece when it is short


def test_a_clip_split_in_pieces_has_the_frames_and_sound_of_one_piece(media, tmp_path, ffmpeg_bin) -> None:
    """Frame for frame (by the source frame each shows), the captions and watermark alike at every join, the sound
    the one-piece render's sample for sample but for its last AAC frame, no transient at a join, A/V aligned."""
    src = media(size="320x180", fps="30000/1001", duration=16, gop=45, pattern="levels", bframes=True)
    info = probe(str(src))
    spec = _spec(src, 1.4, 13.4)
    whole_dir, split_dir = tmp_path / "whole", tmp_path / "split"
    whole_dir.mkdir()
    split_dir.mkdir()
    whole = render_clips([spec], str(src), info, whole_dir, ffmpeg_bin, 120)[0]
    plan = plan_split(spec, str(src), info, split_dir, 4.0)
    assert len(plan.pieces) == 3
    files, poster = [], None
    for piece in plan.pieces:
        out, still, _ = render_piece(
            plan, piece, str(src), split_dir / f"piece-{piece.index}.mp4", ffmpeg_bin, 120, None
        )
        files.append(out)
        poster = poster or still
    sound = render_sound(plan, str(src), split_dir / "sound.m4a", ffmpeg_bin, 120, None)
    joined = join_pieces(plan, files, sound, poster, split_dir, ffmpeg_bin, 120).path
    assert poster is not None and poster.stat().st_size > 0

    # the same source frames, each in its place
    a, b = frame_means(whole.path, corner=0.2), frame_means(joined, corner=0.2)
    assert len(a) == len(b) == plan.frames
    span = frame_span(*spec_cut(spec), source_rate(info))
    for n, (x, y) in enumerate(zip(a, b, strict=True)):
        assert frame_index(x, span.first + n) == frame_index(y, span.first + n) == span.first + n, n
    # each join's two frames: the one-piece render's pictures (captions and watermark drawn alike), same times
    joins = {p.first for p in plan.pieces[1:]} | {p.first - 1 for p in plan.pieces[1:]} | {0, plan.frames - 1}
    fa, fb = _frames(whole.path, joins), _frames(joined, joins)
    for n in sorted(joins):
        assert abs(fa[n][0] - fb[n][0]) < 1e-6, n
        assert _psnr(fa[n][1], fb[n][1]) > 38, n
    # the sound: one encode, the one-piece render's but for its last AAC frame (where the one-piece mux stopped)
    x, y = _pcm(whole.path), _pcm(joined)
    common = min(x.shape[1], y.shape[1]) - 2048
    assert np.abs(x[:, :common] - y[:, :common]).max() < 1e-4
    rate = 48000
    for piece in plan.pieces[1:]:  # no transient at a join: the sample-to-sample step there is an ordinary one
        at = round(piece.first / float(info.fps) * rate)
        steps = np.abs(np.diff(y[0, at - 480 : at + 480]))
        assert steps.max() <= 1.5 * np.abs(np.diff(y[0, at - 4800 : at - 480])).max() + 1e-6
    starts = _starts(joined)
    assert abs(starts["video"] - starts["audio"]) < 0.02 and _starts(whole.path) == starts


def spec_cut(spec) -> tuple[float, float]:
    return spec.cut_start, spec.cut_end


def test_what_renders_whole_whatever_its_length(media) -> None:
    src = media(size="320x180", duration=4)
    info = probe(str(src))
    settings = Settings(split_seconds=60, piece_seconds=15)
    assert splits(_spec(src, 0, 3), 120, settings, info)
    assert not splits(_spec(src, 0, 3), 59, settings, info)
    assert not splits(_spec(src, 0, 3, fit="speaker"), 120, settings, info)
    assert not splits(_spec(src, 0, 3, tighten=0.5), 120, settings, info)
    assert not splits(_spec(src, 0, 3), 120, Settings(split_seconds=0), info)


def _no_pieces_left(env: dict[str, str], clips: Path) -> None:
    assert not list((clips / "pieces").glob("**/*")) if (clips / "pieces").exists() else True
    connection = redis.Redis.from_url(env["QUOTECLIP_REDIS_URL"])
    assert connection.keys("quoteclip:piece:*") == []
    assert connection.keys("rq:job:piece-*") == [] or all(
        connection.hget(k, "status") in (b"finished", None) for k in connection.keys("rq:job:piece-*")
    )


@pytest.mark.slow
def test_a_long_clip_is_rendered_by_two_workers_under_the_one_piece_key(
    media, queue_env, workers, tmp_path, ffmpeg_bin
) -> None:
    src = media(size="320x180", fps=30, duration=16, gop=60, pattern="levels")
    queue_env.update(QUOTECLIP_SPLIT_SECONDS="5", QUOTECLIP_PIECE_SECONDS="3")
    settings = Settings.from_env(queue_env)
    spec = _spec(src, 1.0, 13.0)
    slow = tmp_path / "ffmpeg-slow"  # (each piece a second longer: both workers surely take some)
    slow.write_text(
        f'#!/bin/sh\ncase " $* " in {REPORT_PASS}) ;; *" -an "*) sleep 1 ;; esac\nexec "{ffmpeg_bin}" "$@"\n'
    )
    slow.chmod(0o755)
    workers.env = {**queue_env, "FFMPEG_BINARY": str(slow)}
    procs = [workers.start(burst=False, name=f"split-{n}-{time.monotonic_ns()}") for n in range(2)]
    job = enqueue_clip(spec, settings).job_id
    try:
        deadline = time.monotonic() + 120
        while job_status(job, settings)["status"] not in ("finished", "failed") and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for proc in procs:
            proc.terminate()
        logs = [proc.communicate(timeout=30)[0] for proc in procs]
    body = job_status(job, settings)
    assert body["status"] == "finished", body
    joined = Path(str(body["link"]).removeprefix("file://"))
    # the same clip (key and frames) as a render in one piece
    whole = produce_clip(
        spec, Settings(storage_dir=tmp_path / "whole", allow_local_sources=True), LocalStorage(tmp_path / "whole")
    )
    assert whole.key == joined.stem
    a, b = frame_means(Path(whole.link.removeprefix("file://")), corner=0.2), frame_means(joined, corner=0.2)
    assert len(a) == len(b) == 360
    assert [frame_index(x, 30 + n) for n, x in enumerate(a)] == [frame_index(y, 30 + n) for n, y in enumerate(b)]
    # both workers rendered pieces; the one that joined said how many were its own
    assert sum("stored piece" in log for log in logs) >= 1, logs
    said = [line for log in logs for line in log.splitlines() if "rendered in 4 pieces" in line]
    assert len(said) == 1, logs
    _no_pieces_left(queue_env, Path(queue_env["QUOTECLIP_STORAGE_DIR"]))


@pytest.mark.slow
def test_a_worker_killed_mid_piece_costs_that_piece_only(media, queue_env, tmp_path, ffmpeg_bin) -> None:
    """Worker B takes a piece and is SIGKILLed (with its horse and ffmpeg) while rendering it; the clip's worker
    takes the piece once B's claim lapses, and the clip is stored once, with nothing of the pieces left."""
    src = media(size="320x180", fps=30, duration=16, gop=60, pattern="levels")
    queue_env.update(QUOTECLIP_SPLIT_SECONDS="5", QUOTECLIP_PIECE_SECONDS="4")
    settings = Settings.from_env(queue_env)
    marker = tmp_path / "b-took-a-piece"
    stuck = tmp_path / "ffmpeg-stuck"
    stuck.write_text(
        f'#!/bin/sh\ncase " $* " in {REPORT_PASS}) ;; *" -an "*) touch "{marker}"; sleep 120 ;; esac\n'
        f'exec "{ffmpeg_bin}" "$@"\n'
    )
    stuck.chmod(0o755)
    a = Workers(queue_env, tmp_path)
    b = Workers({**queue_env, "FFMPEG_BINARY": str(stuck)}, tmp_path)
    spec = _spec(src, 1.0, 13.0)
    job = enqueue_clip(spec, settings).job_id
    worker_a = a.start(burst=False, name=f"a-{os.getpid()}")
    try:
        deadline = time.monotonic() + 60
        while job_status(job, settings)["status"] != "started" and time.monotonic() < deadline:
            time.sleep(0.05)
        worker_b = subprocess.Popen(
            [sys.executable, "-m", "cli", "worker", "--name", f"b-{os.getpid()}"],
            env=b.full_env(),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "worker B never took a piece"
        os.killpg(worker_b.pid, signal.SIGKILL)  # the worker, its work-horse and the stuck ffmpeg
        worker_b.wait(timeout=10)
        deadline = time.monotonic() + 90
        while job_status(job, settings)["status"] not in ("finished", "failed") and time.monotonic() < deadline:
            time.sleep(0.1)
        body = job_status(job, settings)
        assert body["status"] == "finished", body
    finally:
        worker_a.terminate()
        out, _ = worker_a.communicate(timeout=30)
    clips = Path(queue_env["QUOTECLIP_STORAGE_DIR"])
    assert len(list(clips.glob("*.mp4"))) == 1
    joined = next(clips.glob("*.mp4"))
    assert len(frame_means(joined, corner=0.2)) == 360
    _no_pieces_left(queue_env, clips)
    meta = json.loads(joined.with_suffix(".json").read_text())
    assert meta["duration"] == "12.000"


def test_a_source_with_gaps_in_its_timing_renders_whole(media, tmp_path, ffmpeg_bin) -> None:
    """A source looped by stream copy has gaps at its joins, so its average rate is under its frame rate and a
    render drops frames there: pieces would drop others, so such a clip is not split."""
    from testkit.media import ffmpeg as run_ffmpeg

    base = media(size="320x180", fps=30, duration=4, gop=240, pattern="testsrc", preset="veryfast")
    src = tmp_path / "looped.mp4"
    run_ffmpeg(ffmpeg_bin, "-stream_loop", "3", "-i", str(base), "-c", "copy", str(src))
    info = probe(str(src))
    assert info.frame_rate != "30"  # (the gaps pull the average rate down)
    assert not splits(_spec(src, 1.0, 15.0), 120, Settings(split_seconds=60, piece_seconds=15), info)
    assert splits(_spec(base, 0, 3), 120, Settings(split_seconds=60, piece_seconds=15), probe(str(base)))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_pieces_wait_in_the_store_and_are_removed_by_clip(where, request, tmp_path) -> None:
    from storage import open_storage

    if where == "s3":
        s3 = request.getfixturevalue("s3")
        settings = Settings.from_env(s3.env())
    else:
        settings = Settings(storage_dir=tmp_path / "clips")
    storage = open_storage(settings)
    piece = tmp_path / "piece.mp4"
    piece.write_bytes(b"piece bytes")
    for key in ("a" * 32, "b" * 32):
        storage.put_piece(f"{key}/0.mp4", piece)
        storage.put_piece(f"{key}/1.mp4", piece)
    got = tmp_path / "got.mp4"
    assert storage.get_piece(f"{'a' * 32}/1.mp4", got) and got.read_bytes() == b"piece bytes"
    assert not storage.get_piece(f"{'a' * 32}/7.mp4", got)
    assert storage.delete_pieces(f"{'a' * 32}/") == 2
    assert not storage.get_piece(f"{'a' * 32}/0.mp4", got)
    assert storage.get_piece(f"{'b' * 32}/0.mp4", got)  # (another clip's pieces stay)
    assert storage.delete_pieces(f"{'b' * 32}/") == 2 and storage.delete_pieces(f"{'b' * 32}/") == 0


@pytest.mark.slow
def test_a_180_s_clip_split_and_whole_have_the_same_frames_at_every_join(media, tmp_path, ffmpeg_bin) -> None:
    """The issue's length: 180 s in 12 pieces of 15 s against one piece, the same length and, by each frame's source
    frame, the same frames at the cut points and on both sides of every join."""
    src = media(size="320x180", fps=30, duration=190, gop=240, pattern="levels")
    info = probe(str(src))
    spec = _spec(src, 4.2, 184.2)
    whole_dir, split_dir = tmp_path / "whole", tmp_path / "split"
    whole_dir.mkdir()
    split_dir.mkdir()
    whole = render_clips([spec], str(src), info, whole_dir, ffmpeg_bin, 600)[0]
    plan = plan_split(spec, str(src), info, split_dir, 15.0)
    assert len(plan.pieces) == 12
    files = [
        render_piece(plan, p, str(src), split_dir / f"piece-{p.index}.mp4", ffmpeg_bin, 120, None)[0]
        for p in plan.pieces
    ]
    sound = render_sound(plan, str(src), split_dir / "sound.m4a", ffmpeg_bin, 120, None)
    joined = join_pieces(plan, files, sound, None, split_dir, ffmpeg_bin, 120)
    assert joined.duration == whole.duration
    a, b = frame_means(whole.path, corner=0.2), frame_means(joined.path, corner=0.2)
    assert len(a) == len(b) == plan.frames == 5400
    span = frame_span(spec.cut_start, spec.cut_end, source_rate(info))
    points = {0, plan.frames - 1} | {p.first for p in plan.pieces[1:]} | {p.first - 1 for p in plan.pieces[1:]}
    for n in sorted(points):
        assert frame_index(a[n], span.first + n) == frame_index(b[n], span.first + n) == span.first + n, n
    assert [frame_index(x, span.first + n) for n, x in enumerate(a)] == [
        frame_index(y, span.first + n) for n, y in enumerate(b)
    ]


def test_a_split_clips_stream_plays_its_pieces_in_order_while_they_render(
    media, redis_url, tmp_path, monkeypatch
) -> None:
    """A clip rendered in pieces streams: its stream is the init segment, then the first piece's fragments while it
    renders (before its file is finished), then each other piece's once it and the clip's sound are here, in the
    clip's order, on the clip's clock (each fragment starts where the one before ends); it decodes to the stored
    clip's pictures, frame for frame and time for time, with its sound from the clip's start to its end, no gap
    between the pieces' sound over an AAC frame; each fragment's samples in decode-time order."""
    import tempfile

    from test_streaming import Collected, decoded

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(work))  # (the render's temp folder, where its pieces are)
    unfinished: list[bool] = []

    class Watched(Collected):
        def piece(self, piece) -> None:
            if piece.kind == "fragment" and not unfinished:
                files = list(work.rglob("piece-0.mp4"))
                unfinished.append(len(files) == 1 and b"moov" not in files[0].read_bytes())
            super().piece(piece)

    from jobs.pieces import Fleet
    from jobs.pipeline.produce import produce_clips

    src = media(size="320x180", fps=30, duration=12, gop=60, pattern="levels")
    settings = Settings(
        storage_dir=tmp_path / "clips",
        allow_local_sources=True,
        split_seconds=5,
        piece_seconds=3,
        redis_url=redis_url,
    )
    spec = _spec(src, 1.0, 10.0)
    stream = Watched()
    connection = redis.Redis.from_url(redis_url)
    clip = produce_clips(
        [spec], settings, LocalStorage(tmp_path / "clips"), stream=stream, fleet=Fleet(connection, "split-stream")
    )[0]
    assert (clip.timings or {}).get("pieces") == 3, clip.timings
    kinds = [p.kind for p in stream.pieces]
    assert kinds[0] == "init" and kinds.count("init") == 1 and stream.ended == "finished", kinds
    assert unfinished == [True]
    fragments = [p for p in stream.pieces if p.kind == "fragment"]
    assert fragments[0].start == 0
    for before, after in zip(fragments, fragments[1:], strict=False):
        assert abs(after.start - (before.start + before.seconds)) < 0.5 / 30, (before, after)
    assert abs(fragments[-1].start + fragments[-1].seconds - 9.0) < 0.5 / 30
    # each fragment's samples in decode-time order to within a frame, the first piece's as the encoders hand them
    # to the muxer (as a one-piece render's, tests/test_visitor_stream.py), the others' as copied from their files
    from test_visitor_stream import laid_out

    for fragment in fragments:
        order = laid_out(fragment, stream.pieces[0])
        late = [(a, b) for a, b in zip(order, order[1:], strict=False) if b[0] < a[0] - 1 / 30 - 1e-6]
        assert not late, (fragment.start, late[:3])
    stored = Path(str(clip.path))
    assert decoded(stream.data())["video"] == decoded(stored)["video"]  # the stored clip's pictures, at their times
    with av.open(io.BytesIO(stream.data())) as c:
        sound = [(float(f.time or 0.0), f.samples / f.sample_rate) for f in c.decode(audio=0)]
    assert sound[0][0] < 0.03 and abs(sound[-1][0] + sound[-1][1] - 9.0) < 0.05, (sound[0], sound[-1])
    gaps = [b[0] - (a[0] + a[1]) for a, b in zip(sound, sound[1:], strict=False)]
    assert max(gaps) < 1024 / 48000 + 0.001, max(gaps)


def test_the_first_piece_streams_while_it_renders_with_its_sound(media, tmp_path, ffmpeg_bin) -> None:
    """The first piece of a split clip streams live, as a one-piece render does: its first fragment is handed over
    before ffmpeg has finished the piece's file (a plain MP4's index comes at its end), with the picture and the
    span's sound; the piece's file is still the picture alone, the frames a piece rendered without a stream has.
    A levelled clip's piece does not stream while it renders (its loudness is measured over the whole cut)."""
    from test_streaming import Collected, decoded

    src = media(size="320x180", fps=30, duration=12, gop=60, pattern="levels")
    spec = _spec(src, 1.0, 10.0)
    info = probe(str(src))
    plan = plan_split(spec, str(src), info, tmp_path, piece_seconds=4.5)
    first = plan.pieces[0]
    stream, indexed_before_first = Collected(), []

    def sink(part) -> None:
        if part.kind == "fragment" and not indexed_before_first:
            indexed_before_first.append(b"moov" in (tmp_path / "live.mp4").read_bytes())
        stream.piece(part)

    render_piece(plan, first, str(src), tmp_path / "live.mp4", ffmpeg_bin, 60, None, sink)
    assert indexed_before_first == [False]
    kinds = [p.kind for p in stream.pieces]
    assert kinds[0] == "init" and kinds.count("init") == 1 and len(kinds) > 3, kinds
    with av.open(io.BytesIO(stream.data())) as c:
        assert {s.type for s in c.streams} == {"video", "audio"}
        sound = [(float(f.time or 0.0), f.samples / f.sample_rate) for f in c.decode(audio=0)]
    length = first.count / 30
    assert sound[0][0] < 0.03 and abs(sound[-1][0] + sound[-1][1] - length) < 0.05, (sound[0], sound[-1], length)
    render_piece(plan, first, str(src), tmp_path / "plain.mp4", ffmpeg_bin, 60, None)
    with av.open(str(tmp_path / "live.mp4")) as c:
        assert [s.type for s in c.streams] == ["video"]
    assert decoded(tmp_path / "live.mp4")["video"] == decoded(tmp_path / "plain.mp4")["video"]
    assert decoded(stream.data())["video"] == decoded(tmp_path / "plain.mp4")["video"]

    levelled = plan_split(_spec(src, 1.0, 10.0, loudness=-16), str(src), info, tmp_path, piece_seconds=4.5)
    untouched = Collected()
    render_piece(
        levelled, levelled.pieces[0], str(src), tmp_path / "levelled.mp4", ffmpeg_bin, 60, None, untouched.piece
    )
    assert untouched.pieces == []


def test_a_piece_that_ends_after_its_clip_failed_stores_nothing(media, queue_env, tmp_path, ffmpeg_bin) -> None:
    """The clip's job fails (its sound's ffmpeg fails, after its first piece): no piece, piece job or marker of it
    is left but the clip's failure, and a piece job already under way on another worker when it failed (run here
    after the failure) sees it and stores no piece."""
    from rq import Queue

    from jobs.pieces import Fleet
    from jobs.pipeline.produce import produce_clips
    from quoteclip.errors import QuoteclipError

    src = media(size="320x180", fps=30, duration=12, gop=60, pattern="levels")
    broken = tmp_path / "ffmpeg-no-sound"
    broken.write_text(
        f'#!/bin/sh\ncase " $* " in {REPORT_PASS}) ;; *" -vn "*) echo "no sound here" >&2; exit 1 ;; esac\n'
        f'exec "{ffmpeg_bin}" "$@"\n'
    )
    broken.chmod(0o755)
    queue_env.update(QUOTECLIP_SPLIT_SECONDS="5", QUOTECLIP_PIECE_SECONDS="3", FFMPEG_BINARY=str(broken))
    settings = Settings.from_env(queue_env).for_queue()
    connection = redis.Redis.from_url(queue_env["QUOTECLIP_REDIS_URL"])
    clips = Path(queue_env["QUOTECLIP_STORAGE_DIR"])
    spec = _spec(src, 1.0, 10.0)
    with pytest.raises(QuoteclipError, match="sound|ffmpeg"):
        produce_clips([spec], settings, LocalStorage(clips), fleet=Fleet(connection, settings.queue_name))
    failed = connection.keys("quoteclip:piece:*:failed")
    assert len(failed) == 1, connection.keys("quoteclip:piece:*")
    key = failed[0].decode().split(":")[2]
    assert [k for k in connection.keys(f"quoteclip:piece:{key}:*") if k != failed[0]] == []
    offered = [k for k in connection.keys("rq:job:piece-*") if connection.hget(k, "status") == b"queued"]
    assert offered == []  # (the piece jobs it offered, removed)
    late = Queue(settings.queue_name, connection=connection).enqueue(
        "jobs.pieces.render_piece_job", spec.model_dump(mode="json"), key, 1, settings.piece_seconds
    )
    Workers(queue_env, tmp_path).burst(1)
    assert late.latest_result().return_value == {"piece": 1, "rendered": False}
    assert not (clips / "pieces").exists() or not list((clips / "pieces").rglob("*.mp4"))
    assert connection.keys(f"quoteclip:piece:{key}:*:done") == []
