"""Platform presets: what each app takes, in one table (where each number comes from: docs/creators.md).

A preset names a shape (at 720p), the margins the captions keep clear of the app's own buttons and text, the
longest clip the app takes, the loudness its clips are levelled to and the bitrate and file size it accepts. The
apps change these; this table is the one place to change them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PlatformName = Literal["shorts", "reels", "tiktok", "x", "linkedin", "youtube"]

# Loudness of every preset: the level the apps play speech at (EBU R128 integrated, LUFS) and the true peak a
# levelled clip keeps under (dBTP).
PLATFORM_LOUDNESS = -14.0
TRUE_PEAK = -1.0


@dataclass(frozen=True)
class Platform:
    """One app's preset."""

    name: str
    title: str  # as the app is called in messages and docs
    profile: str  # the shape (quoteclip.spec.PROFILES), 720p
    max_seconds: float  # the longest clip the app takes
    bottom_safe: float | None  # share of the frame's height kept clear at the bottom (None: the profile's)
    right_safe: float | None  # share of the frame's width kept clear at the right (and so the left: lines centred)
    max_kbps: int | None  # the highest bitrate the app takes (video and sound together), kbit/s; None: no cap
    max_bytes: int  # the largest file the app takes
    loudness: float = PLATFORM_LOUDNESS


MB = 1024 * 1024
GB = 1024 * MB

PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        # YouTube Shorts: vertical, up to 3 minutes; the title, channel and subscribe button over the bottom quarter,
        # the like/comment/share/remix column at the right
        Platform("shorts", "YouTube Shorts", "vertical", 180.0, 0.25, 0.12, None, 256 * GB),
        # Instagram Reels: up to 3 minutes in the app; Meta's safe zone keeps the bottom 35% and 6% of each side clear;
        # the Reels publishing API takes at most 25 Mbit/s and 300 MB
        Platform("reels", "Instagram Reels", "vertical", 180.0, 0.35, 0.06, 25_000, 300 * MB),
        # TikTok: up to 10 minutes uploaded; caption, sound and account name over the bottom, the action column at
        # the right; the content posting API takes files up to 4 GB
        Platform("tiktok", "TikTok", "vertical", 600.0, 0.25, 0.13, None, 4 * GB),
        # X: 0.5–140 s, 512 MB, 1280x720 landscape recommended, about 5 Mbit/s at 720p
        Platform("x", "X", "landscape", 140.0, None, None, 5_000, 512 * MB),
        # LinkedIn: up to 10 minutes from the app (15 from a desktop), 5 GB, 192 kbit/s – 30 Mbit/s; square shows
        # large in the feed
        Platform("linkedin", "LinkedIn", "square", 600.0, None, None, 30_000, 5 * GB),
        # YouTube: landscape; 15 minutes for an account that is not verified (longer once verified)
        Platform("youtube", "YouTube", "landscape", 900.0, None, None, None, 256 * GB),
    )
}


def platform(name: str) -> Platform:
    """The preset called ``name`` (one of PLATFORMS; the spec checks the name before this is asked)."""
    return PLATFORMS[name]


def parse_platforms(value: str) -> tuple[str, ...]:
    """``shorts,reels,x``: the platforms one quote is rendered for, in order, each once (ValueError naming the
    first unknown one)."""
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in PLATFORMS]
    if unknown:
        raise ValueError(f"platform: unknown platform {unknown[0][:40]!r} (one of {', '.join(PLATFORMS)})")
    if not names:
        raise ValueError(f"platform: name at least one of {', '.join(PLATFORMS)}")
    return tuple(dict.fromkeys(names))
