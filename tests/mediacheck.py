"""Helpers that check rendered files for real: streams, atoms, frames and samples decoded with PyAV."""

from __future__ import annotations

import struct
from pathlib import Path

import av
import numpy as np


def streams(path: Path) -> dict[str, object]:
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        a = c.streams.audio[0] if c.streams.audio else None
        frames = sum(1 for _ in c.demux(v) if _.size)
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        return {
            "vcodec": v.codec_context.name,
            "pix_fmt": v.codec_context.pix_fmt,
            "width": v.codec_context.width,
            "height": v.codec_context.height,
            "fps": float(v.average_rate or 0),
            "frames": frames,
            "duration": float(c.duration or 0) / av.time_base,
            "acodec": a.codec_context.name if a else None,
            "format": c.format.name,
        }


def decoded_digest(path: Path) -> str:
    """A digest of what a player shows and plays: every decoded video and audio frame's samples and time. (Two
    files can hold the same frames and samples and still differ in bytes: a byte comparison of two encodes is not
    a test of their content.)"""
    import hashlib

    digest = hashlib.sha256()
    with av.open(str(path)) as c:
        for frame in c.decode(*c.streams):
            digest.update(f"{frame.time}".encode())
            for plane in frame.planes:
                digest.update(bytes(plane))
    return digest.hexdigest()


def assert_same_encode(a: Path, b: Path, min_psnr: float = 50.0) -> None:
    """Two encodes of the same frames and sound (where the test cannot run the encoder on one thread: see
    ``one_encoder_thread``): the same frame times, the same sound sample for sample, and each picture within what
    x264's frame threads may choose differently, PSNR ≥ ``min_psnr`` dB against the other's (a frame off by one,
    another size or position is far below it)."""

    def decoded(path: Path) -> tuple[list[tuple[float, np.ndarray]], str]:
        import hashlib

        pictures, sound = [], hashlib.sha256()
        with av.open(str(path)) as c:
            for frame in c.decode(*c.streams):
                if isinstance(frame, av.VideoFrame):
                    pictures.append((float(frame.time or 0.0), frame.to_ndarray(format="yuv420p").astype(np.float64)))
                else:
                    sound.update(f"{frame.time}".encode())
                    for plane in frame.planes:
                        sound.update(bytes(plane))
        return pictures, sound.hexdigest()

    (ours, our_sound), (theirs, their_sound) = decoded(a), decoded(b)
    assert [t for t, _ in ours] == [t for t, _ in theirs] and our_sound == their_sound
    for (t, x), (_, y) in zip(ours, theirs, strict=True):
        mse = float(np.mean((x - y) ** 2))
        assert mse == 0 or 10 * np.log10(255**2 / mse) >= min_psnr, f"the picture at {t:.3f} s differs"


def boxes(data: bytes) -> list[tuple[str, int]]:
    """The top-level boxes of MP4 bytes: (kind, the offset just past it)."""
    found, at = [], 0
    while at + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        if size == 1:
            size = struct.unpack(">Q", data[at + 8 : at + 16])[0]
        at = len(data) if size == 0 else at + size  # (size 0: the box runs to the end)
        found.append((kind.decode("latin-1"), at))
    return found


def top_level_atoms(path: Path) -> list[str]:
    return [kind for kind, _ in boxes(path.read_bytes())]


def gray_frames(
    path: Path, size: tuple[int, int] = (160, 90), limit: int | None = None
) -> list[tuple[float, np.ndarray]]:
    """(pts seconds, small grayscale array) for each frame."""
    out = []
    with av.open(str(path)) as c:
        for frame in c.decode(video=0):
            img = frame.reformat(width=size[0], height=size[1], format="gray").to_ndarray().astype(np.float32)
            out.append((float(frame.time or 0.0), img))
            if limit and len(out) >= limit:
                break
    return out


def rgb_frame(path: Path, at: float = 0.5) -> np.ndarray:
    with av.open(str(path)) as c:
        for frame in c.decode(video=0):
            if (frame.time or 0.0) >= at:
                return frame.to_ndarray(format="rgb24").astype(np.int16)
    raise AssertionError(f"no frame at {at} s in {path}")


def first_loud_sample(path: Path, threshold: float = 0.2) -> float | None:
    """Time in seconds of the first audio sample above ``threshold`` (float audio)."""
    with av.open(str(path)) as c:
        for frame in c.decode(audio=0):
            data = frame.to_ndarray()
            if data.ndim > 1:
                data = np.abs(data).max(axis=0)
            loud = np.nonzero(np.abs(data) > threshold)[0]
            if loud.size:
                return float(frame.time or 0.0) + loud[0] / frame.sample_rate
    return None


def first_bright_frame(path: Path, threshold: float = 128) -> float | None:
    for t, img in gray_frames(path):
        if img.mean() > threshold:
            return t
    return None


def level(index: int) -> float:
    """The gray mean (full range) of frame ``index`` of a "levels" source."""
    return (index * 37 % 200) * 255 / 219


def frame_index(gray_mean: float, near: int, spread: int = 3) -> int:
    """Which frame of a "levels" source (within ``spread`` of ``near``) has this gray mean."""
    return min(range(max(0, near - spread), near + spread + 1), key=lambda n: abs(level(n) - gray_mean))


def frame_means(path: Path, limit: int | None = None, corner: float = 1.0) -> list[float]:
    """The gray mean of each frame as a player shows them (the MP4 edit list applied); with ``corner``, of the
    top-left part of that size (clear of the captions and the watermark)."""
    out = []
    with av.open(str(path)) as c:
        for frame in c.decode(video=0):
            gray = frame.to_ndarray(format="gray")
            out.append(float(gray[: int(gray.shape[0] * corner), : int(gray.shape[1] * corner)].mean()))
            if limit and len(out) >= limit:
                break
    return out
