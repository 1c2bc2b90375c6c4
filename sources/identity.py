"""What a source URL names, from the URL alone (no network, no yt-dlp import): the clip key is computed at
enqueue, before any extraction, so every spelling of one video must give one identity.

YouTube's forms are few and documented by its own links: ``youtube.com/watch?v=ID`` (any subdomain: www, m,
music), ``youtu.be/ID``, ``youtube.com/shorts/ID``, ``/embed/ID``, ``/live/ID``, ``/v/ID``, and
``youtube-nocookie.com/embed/ID``; query parameters such as ``t=42``, ``si=…`` or ``feature=share`` do not change
the video. Any other URL is its own identity, less a ``#fragment`` (never sent to a server).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

VIDEO_ID = re.compile(r"\A[A-Za-z0-9_-]{11}\Z")
PATH_FORMS = re.compile(r"\A/(?:shorts|embed|live|v|e)/([A-Za-z0-9_-]{11})(?:[/?]|\Z)")


def youtube_id(url: str) -> str | None:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host == "youtu.be" or host.endswith(".youtu.be"):
        candidate = parts.path.lstrip("/").split("/")[0]
        return candidate if VIDEO_ID.match(candidate) else None
    if not (
        host in ("youtube.com", "youtube-nocookie.com") or host.endswith((".youtube.com", ".youtube-nocookie.com"))
    ):
        return None
    if parts.path in ("/watch", "/watch/"):
        candidate = (parse_qs(parts.query).get("v") or [""])[0]
        return candidate if VIDEO_ID.match(candidate) else None
    match = PATH_FORMS.match(parts.path)
    return match.group(1) if match else None


def url_identity(url: str) -> str:
    """``youtube:<id>`` for every spelling of one YouTube video; ``url:<url without #fragment>`` otherwise."""
    video = youtube_id(url)
    if video is not None:
        return f"youtube:{video}"
    return "url:" + url.split("#", 1)[0]
