"""Speaker reframing: follow the main face when a landscape source is cropped to a narrower frame.

Faces are found with OpenCV's bundled Haar cascade (its model ships in the opencv-python-headless wheel) on
frames sampled twice a second, the largest face's centre is smoothed over time, and the crop's x position
becomes a piecewise-linear ffmpeg expression of t built from numbers only.
"""

from __future__ import annotations

import statistics
from typing import Any

import av

from quoteclip.errors import BadInput

from .probe import FORMATS, Readable

SAMPLES_PER_SECOND = 2
DETECT_WIDTH = 640  # faces under ~24 px are not found: keep 720p sources near full size
MAX_SPEED = 0.25  # of the frame width per second: the window pans, it does not jump


def _detector() -> Any:
    try:
        import cv2
    except ImportError:
        raise BadInput("fit: speaker needs OpenCV: pip install 'quoteclip[speaker]'") from None
    path = getattr(cv2, "data").haarcascades + "haarcascade_frontalface_default.xml"  # noqa: B009 (untyped)
    detector = cv2.CascadeClassifier(path)
    if detector.empty():
        raise BadInput(f"fit: speaker needs OpenCV's face model, missing at {path}")
    return detector


def face_track(source: Readable, start: float, duration: float) -> list[tuple[float, float]]:
    """(clip seconds, face centre as a fraction of the frame width), sampled through the cut."""
    detector = _detector()
    import numpy as np  # comes with OpenCV (the speaker extra); a plain install never loads it

    if not isinstance(source, str):
        source.seek(0)
    points: list[tuple[float, float]] = []
    step = 1.0 / SAMPLES_PER_SECOND
    next_t = 0.0
    with av.open(source, mode="r", options={"format_whitelist": FORMATS}) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        container.seek(int(max(0.0, start) * av.time_base), any_frame=False, backward=True)
        for frame in container.decode(stream):
            t = float(frame.time or 0.0) - start
            if t < next_t - 1e-6:
                continue
            if t > duration:
                break
            next_t = t + step
            image = frame.to_ndarray(format="gray")
            scale = DETECT_WIDTH / image.shape[1]
            small = image[:: max(1, round(1 / scale)), :: max(1, round(1 / scale))]
            faces = detector.detectMultiScale(np.ascontiguousarray(small), scaleFactor=1.1, minNeighbors=5)
            if len(faces):
                x, _, w, _ = max(faces, key=lambda f: f[2] * f[3])
                points.append((round(t, 3), float((x + w / 2) / small.shape[1])))
    return _smooth(points)


def _smooth(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Median of three, then a speed limit, so the window pans steadily."""
    if not points:
        return []
    xs = [p[1] for p in points]
    med = [float(statistics.median(xs[max(0, i - 1) : i + 2])) for i in range(len(xs))]
    out = [(points[0][0], med[0])]
    for (t, _), x in zip(points[1:], med[1:], strict=True):
        prev_t, prev_x = out[-1]
        limit = MAX_SPEED * max(t - prev_t, 1e-3)
        out.append((t, prev_x + max(-limit, min(limit, x - prev_x))))
    return out


def crop_x_expression(track: list[tuple[float, float]], scaled_width: int, out_width: int) -> str:
    """The crop's left edge over time: follow the face centre, clamped inside the scaled frame."""
    span = max(0, scaled_width - out_width)

    def left(fraction: float) -> float:
        return round(min(span, max(0.0, fraction * scaled_width - out_width / 2)), 1)

    if not track:
        return str(span // 2)
    expr = str(left(track[-1][1]))
    for (t0, x0), (t1, x1) in reversed(list(zip(track, track[1:], strict=False))):
        a, b = left(x0), left(x1)
        seg = f"{a}+({b}-{a})*(t-{t0})/{max(t1 - t0, 1e-3):.3f}"
        expr = f"if(lt(t,{t1}),{seg},{expr})"
    return f"if(lt(t,{track[0][0]}),{left(track[0][1])},{expr})"
