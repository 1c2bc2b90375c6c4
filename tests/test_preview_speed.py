"""An encoded preview's picture is scaled by area averaging (about half the CPU of bicubic from 1080p, its largest
cost after the decode); the final's scaling is bicubic, its command as before."""

from __future__ import annotations

import re

import pytest

from quoteclip.spec import ClipSpec
from renderer.plan import build_command
from renderer.probe import MediaInfo

INFO = MediaInfo(
    duration=1200, width=1920, height=1080, rotation=0, fps=30, frame_rate="30", video_codec="h264", has_audio=True
)


def scalers(quality: str, fit: str, profile: str) -> list[str]:
    """The scaling filter of each scale of the source's frames in the command (swscale's default: bicubic); the
    blurred fill's upscale of its own small picture is not one."""
    spec = ClipSpec(source="in.mp4", start=60, end=80, quality=quality, fit=fit, profile=profile)
    graph = build_command(spec, INFO, "/src/in.mp4", [], "/t/clip.mp4")
    graph_text = graph[graph.index("-filter_complex") + 1]
    scales = [s for s in re.findall(r"scale=([^;\[]*)", graph_text) if "force_original_aspect_ratio" in s]
    assert scales, graph_text
    return [m.group(1) if (m := re.search(r"flags=(\w+)", s)) else "bicubic" for s in scales]


@pytest.mark.parametrize(("fit", "profile"), [("pad", "landscape"), ("blur", "vertical"), ("center", "square")])
def test_preview_scales_by_area_and_final_by_bicubic(fit: str, profile: str) -> None:
    assert set(scalers("preview", fit, profile)) == {"area"}
    assert set(scalers("final", fit, profile)) == {"bicubic"}
