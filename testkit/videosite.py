"""A loopback "video site" that behaves as real ones do towards quoteclip (YouTube's rules as yt-dlp's
documentation and issue tracker describe them; YouTube itself cannot be reached from the test machines):

- ``/watch/ID`` is a page whose media URLs are freshly signed on every load (``?sig=…&expire=…``), with a
  header every media request must carry (``X-Site-Token``, as yt-dlp's ``http_headers``);
- media URLs answer 403 to HEAD, to a request without a Range, to an open-ended range and to a range over
  10 MiB; a signature is good for ``uses`` requests, then 403 (an expired link);
- a format may be refused (403) until its ``available_at`` time; a cookie may be required for media;
- a format may be HLS only: a signed playlist URL, segments (10 s, MPEG-TS) beside it, fetched whole;
- the plain (non-HLS, non-DASH) formats may be refused (``plain="refused"``: listed, then 403 to every request,
  as YouTube's ``web`` client formats without a PO token) or left out of the page (``plain="gone"``: SABR-only);
- or DASH: a signed manifest (read by yt-dlp's own MPD parser) naming fMP4 fragments beside it;
- an episode may carry captions, as YouTube lists them: automatic (speech recognition) or human-made tracks, in
  json3 or WebVTT, each at a URL of its own (``/captions/ID/N.EXT``);
- the yt-dlp extractor for it is a plugin (testkit/plugins), found on the Python path as any plugin is.
"""

from __future__ import annotations

import html
import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from sources.ranges import Body, RangeHandler
from testkit.services import _range_rule_broken


@dataclass
class SiteFormat:
    format_id: str
    file: Path
    ext: str = "mp4"
    vcodec: str = "avc1.64001f"
    acodec: str = "none"
    width: int | None = None
    height: int | None = None
    available_in: float | None = None  # seconds after the page load before the format answers
    hls: bool = False  # ``file`` is an HLS playlist (index.m3u8) with its segments beside it
    dash: bool = False  # ``file`` is a DASH manifest (manifest.mpd) with its fragments beside it


@dataclass
class SiteCaption:
    lang: str
    ext: str  # "json3" or "vtt"
    text: str
    auto: bool = True  # the site's speech recognition (else made by people)


@dataclass
class Episode:
    title: str
    duration: float
    formats: list[SiteFormat]
    captions: list[SiteCaption] = field(default_factory=list)


@dataclass
class VideoSite:
    episodes: dict[str, Episode] = field(default_factory=dict)
    uses: int = 1_000_000  # requests one signed URL answers before it expires (403)
    uses_by_load: list[int] = field(default_factory=list)  # per page load (1st, 2nd, …), else ``uses``
    lifetime: float = 6 * 3600  # the expire= time written into each URL
    cookie: str | None = None  # "name=value" every media request must carry
    plain: str = "served"  # the plain formats: "served", "refused" (listed, then 403) or "gone" (not listed)
    warnings: list[str] = field(default_factory=list)  # what the extractor warns of on every page (yt-dlp's words)
    page_loads: Counter[str] = field(default_factory=Counter)
    requests: int = 0  # every request, of any path
    bytes_sent: Counter[str] = field(default_factory=Counter)  # "ID/FORMAT" -> bytes
    ranges: list[tuple[str, int, int]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # ("ID/FORMAT", why)
    segments: list[str] = field(default_factory=list)  # HLS segment files sent, in order
    caption_loads: Counter[str] = field(default_factory=Counter)  # "ID/N" -> times a caption track was sent
    _signatures: dict[str, list[float]] = field(default_factory=dict)  # sig -> [uses left, available at]
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def url(self, video_id: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/watch/{video_id}"

    def youtube_url(self, video_id: str) -> str:
        """The same page, read by the plugin's YouTube-like extractor (its key starts with "Youtube", as YouTube's
        own extractors' do): what quoteclip says of YouTube's refusals is said of it."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/youtube/{video_id}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def expire_all(self) -> None:
        """Every URL handed out so far stops working (as signed links do after some hours)."""
        with self._lock:
            for entry in self._signatures.values():
                entry[0] = 0

    def bytes_sent_twice(self) -> int:
        dup = 0
        for name in {n for n, _, _ in self.ranges}:
            reach = 0
            for s, e in sorted((s, e) for n, s, e in self.ranges if n == name):
                if s < reach:
                    dup += min(e, reach) - s
                reach = max(reach, e)
        return dup

    def _page(self, video_id: str) -> str:
        episode = self.episodes[video_id]
        now = time.time()
        load = sum(self.page_loads.values()) - 1
        uses = self.uses_by_load[load] if load < len(self.uses_by_load) else self.uses
        formats = []
        for f in episode.formats:
            if self.plain == "gone" and not (f.hls or f.dash):
                continue
            sig = uuid.uuid4().hex
            available = now + f.available_in if f.available_in else 0.0
            with self._lock:
                self._signatures[sig] = [uses, available]
            signed = f"sig={sig}&expire={int(now + self.lifetime)}"
            formats.append(
                {
                    "format_id": f.format_id,
                    "ext": f.ext,
                    "vcodec": f.vcodec,
                    "acodec": f.acodec,
                    "width": f.width,
                    "height": f.height,
                    **(
                        {"url": f"/hls/{video_id}/{f.format_id}/index.m3u8?{signed}", "protocol": "m3u8_native"}
                        if f.hls
                        else {"manifest": f"/hls/{video_id}/{f.format_id}/manifest.mpd?{signed}"}
                        if f.dash
                        else {"url": f"/media/{video_id}/{f.format_id}?{signed}", "filesize": f.file.stat().st_size}
                    ),
                    **({"available_at": int(available) + 1} if available else {}),
                }
            )
        captions = [
            {"lang": c.lang, "ext": c.ext, "auto": c.auto, "url": f"/captions/{video_id}/{n}.{c.ext}"}
            for n, c in enumerate(episode.captions)
        ]
        data = {
            "title": episode.title,
            "duration": episode.duration,
            "formats": formats,
            "captions": captions,
            "warnings": self.warnings,
            "headers": {"X-Site-Token": f"token-{video_id}"},
        }
        body = json.dumps(data).replace("</", "<\\/")  # raw text inside <script>: no HTML escaping
        player = f'<script id="player" type="application/json">{body}</script>'
        return f"<html><head><title>{html.escape(episode.title)}</title></head><body>{player}</body></html>"

    def _handler(self) -> type[RangeHandler]:
        site = self

        class Handler(RangeHandler):
            chunk = 65536

            def log_message(self, format: str, *args: object) -> None:
                pass

            def open_body(self) -> Body | None:
                self.media_name: str | None = None
                with site._lock:
                    site.requests += 1
                parts = urlsplit(self.path)
                path = parts.path.strip("/").split("/")
                if len(path) == 2 and path[0] in ("watch", "youtube") and path[1] in site.episodes:
                    with site._lock:
                        site.page_loads[path[1]] += 1
                    page = site._page(path[1]).encode()
                    return Body(len(page), lambda o, n: page[o : o + n], "text/html; charset=utf-8")
                if len(path) == 3 and path[0] == "media" and path[1] in site.episodes:
                    return self._media(path[1], path[2], parse_qs(parts.query))
                if len(path) == 3 and path[0] == "captions" and path[1] in site.episodes:
                    number = path[2].split(".")[0]
                    tracks = site.episodes[path[1]].captions
                    if not number.isdigit() or int(number) >= len(tracks):
                        self.send_empty(404)
                        return None
                    with site._lock:
                        site.caption_loads[f"{path[1]}/{number}"] += 1
                    body = tracks[int(number)].text.encode()
                    kind = "text/vtt" if path[2].endswith(".vtt") else "application/json"
                    return Body(len(body), lambda o, n: body[o : o + n], kind)
                if len(path) == 4 and path[0] == "hls" and path[1] in site.episodes:
                    return self._hls(path[1], path[2], path[3], parse_qs(parts.query))
                self.send_empty(404)
                return None

            def _media(self, video_id: str, format_id: str, query: dict[str, list[str]]) -> Body | None:
                name = f"{video_id}/{format_id}"
                found = [f for f in site.episodes[video_id].formats if f.format_id == format_id]
                why = _range_rule_broken(self.command, self.headers.get("Range", ""))
                sig = (query.get("sig") or [""])[0]
                with site._lock:
                    entry = site._signatures.get(sig)
                    if why is None and (entry is None or entry[0] <= 0):
                        why = "expired link"
                    elif why is None and entry is not None and entry[1] > time.time():
                        why = "before available_at"
                    elif why is None and self.headers.get("X-Site-Token") != f"token-{video_id}":
                        why = "missing header"
                    elif why is None and site.cookie and site.cookie not in self.headers.get("Cookie", ""):
                        why = "missing cookie"
                    elif why is None and site.plain != "served":
                        why = "plain refused"
                    if entry is not None:
                        entry[0] -= 1
                    if why is not None:
                        site.refused.append((name, why))
                if why is not None or not found:
                    self.send_empty(403 if found else 404)
                    return None
                file = found[0].file

                def read(offset: int, count: int) -> bytes:
                    with open(file, "rb") as f:
                        f.seek(offset)
                        return f.read(count)

                self.media_name = name
                return Body(file.stat().st_size, read, "video/mp4")

            def _hls(self, video_id: str, format_id: str, name: str, query: dict[str, list[str]]) -> Body | None:
                """The playlist needs a live signature and the site's header; segments the header only."""
                found = [f for f in site.episodes[video_id].formats if f.format_id == format_id and (f.hls or f.dash)]
                sig = (query.get("sig") or [""])[0]
                why = None
                with site._lock:
                    entry = site._signatures.get(sig)
                    if name in ("index.m3u8", "manifest.mpd") and (entry is None or entry[0] <= 0):
                        why = "expired link"
                    elif self.headers.get("X-Site-Token") != f"token-{video_id}":
                        why = "missing header"
                    if why is not None:
                        site.refused.append((f"{video_id}/{format_id}", why))
                file = found[0].file.parent / name if found and "/" not in name else None
                if why is not None or file is None or not file.is_file():
                    self.send_empty(403 if why else 404)
                    return None
                if name not in ("index.m3u8", "manifest.mpd"):
                    self.media_name = f"{video_id}/{format_id}"
                    with site._lock:
                        site.segments.append(name)

                def read(offset: int, count: int) -> bytes:
                    with open(file, "rb") as f:
                        f.seek(offset)
                        return f.read(count)

                kinds = {".m3u8": "application/vnd.apple.mpegurl", ".mpd": "application/dash+xml", ".ts": "video/mp2t"}
                kind = kinds.get(file.suffix, "video/mp4")
                return Body(file.stat().st_size, read, kind)

            def sent(self, start: int, count: int) -> None:
                name = getattr(self, "media_name", None)
                if name is not None:
                    with site._lock:
                        site.bytes_sent[name] += count
                        site.ranges.append((name, start, start + count))

        return Handler
