"""What a source URL names, from the URL alone (no network, no yt-dlp import): the clip key is computed at
enqueue, before any extraction, so every spelling of one video must give one identity, and the page yt-dlp then
reads is rebuilt from that identity (``page_url``), never taken from the user's string: what the key names is
what is fetched.

YouTube's forms are few and documented by its own links: ``youtube.com/watch?v=ID`` (``www``, ``m``, ``music``
or another one-label subdomain), ``youtu.be/ID``, ``youtube.com/shorts/ID``, ``/embed/ID``, ``/live/ID``,
``/v/ID``, ``/e/ID``, and ``youtube-nocookie.com/embed/ID``; query parameters such as ``t=42``, ``si=…``,
``feature=share`` or ``list=…`` do not change the video (a playlist is not read: the page read is the video's
own). A YouTube URL whose video URL readers would read differently is refused: ``v`` given twice or with its name
percent-encoded (``%76=``), parameters separated by ``;``, a ``#fragment`` holding a path (``#/watch?v=…``).
Any other URL is its own identity, less its ``#fragment`` (never sent to a server, and not given to yt-dlp either).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus, urlsplit

from quoteclip.errors import BadInput

VIDEO_ID = re.compile(r"\A[A-Za-z0-9_-]{11}\Z")
# /shorts/ID and the like; "videoseries" and "live_stream" are 11 characters long but name no video
PATH_FORMS = re.compile(r"\A/(?:shorts|embed|live|v|e)/(?!videoseries|live_stream)([A-Za-z0-9_-]{11})(?:/|\Z)")
SHORT_FORM = re.compile(r"\A/([A-Za-z0-9_-]{11})(?:/|\Z)")
# youtube.com and youtube-nocookie.com, bare or under one subdomain label (www, m, music); youtu.be bare
YOUTUBE_HOST = re.compile(r"\A(?:[a-z0-9_]+\.)?youtube(?:-nocookie)?\.com\Z")
SHORT_HOST = "youtu.be"


def _refuse(url: str, why: str) -> BadInput:
    return BadInput(f"source: this YouTube URL {why}, got {url[:200]!r}")


def _query(url: str, query: str) -> list[tuple[str, str]]:
    """The query's parameters as written (names and values not decoded), refusing what readers split differently."""
    if ";" in query:
        raise _refuse(url, "separates its parameters with ';', which some URL readers split on and others do not")
    params = [part.partition("=")[::2] for part in query.split("&") if part]
    for name, _ in params:
        if name != "v" and unquote_plus(name) == "v":
            raise _refuse(url, f"spells the parameter v as {name!r}; write v=")
    if sum(name == "v" for name, _ in params) > 1:
        raise _refuse(url, "gives v= more than once")
    return params


def youtube_id(url: str) -> str | None:
    """The video a YouTube URL names; None for a URL that is not one of YouTube's forms. BadInput for a YouTube URL
    whose video URL readers (yt-dlp among them) would read differently."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return None
    host = parts.netloc.lower()  # no user, password or port in any of YouTube's forms
    if host != SHORT_HOST and not YOUTUBE_HOST.match(host):
        return None
    if "/" in parts.fragment:
        raise _refuse(url, "has a #fragment holding a path, which names another video to some readers")
    params = _query(url, parts.query)
    if host == SHORT_HOST:
        match = SHORT_FORM.match(parts.path)
        return match.group(1) if match else None
    if parts.path in ("/watch", "/watch/"):
        candidate = next((value for name, value in params if name == "v"), "")
        return candidate if VIDEO_ID.match(candidate) else None
    match = PATH_FORMS.match(parts.path)
    return match.group(1) if match else None


def url_identity(url: str) -> str:
    """``youtube:<id>`` for every spelling of one YouTube video; ``url:<url without #fragment>`` otherwise."""
    video = youtube_id(url)
    if video is not None:
        return f"youtube:{video}"
    return "url:" + url.split("#", 1)[0]


def identity_url(identity: str) -> str:
    """The URL an identity names, as the page is read: YouTube's canonical watch link for ``youtube:<id>``."""
    kind, _, rest = identity.partition(":")
    if kind == "youtube":
        return f"https://www.youtube.com/watch?v={rest}"
    if kind == "url":
        return rest
    raise ValueError(f"not a URL's identity: {identity[:100]!r}")


def page_url(url: str) -> str:
    """What yt-dlp is given for the source ``url``: the URL rebuilt from its identity, not the user's string."""
    return identity_url(url_identity(url))
