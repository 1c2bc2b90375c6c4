"""A yt-dlp extractor for the tests' video site (testkit/videosite.py), loaded as yt-dlp loads any plugin (a
``yt_dlp_plugins`` package on the Python path). It hands yt-dlp what a real site's extractor does: freshly signed
media URLs with an ``expire=`` time, the headers every media request must carry, sizes, ``available_at``, and its
caption tracks (human-made ``subtitles``, ``automatic_captions``)."""

from urllib.parse import urljoin

from yt_dlp.extractor.common import InfoExtractor


class QuoteclipVideoSiteIE(InfoExtractor):
    IE_NAME = "quoteclip:videosite"
    _VALID_URL = r"https?://127\.0\.0\.1:\d+/watch/(?P<id>[\w-]+)"

    def _real_extract(self, url):
        video_id = self._match_id(url)
        webpage = self._download_webpage(url, video_id)
        data = self._search_json(
            r'<script[^>]+id="player"[^>]*>', webpage, "player data", video_id, end_pattern=r"</script>"
        )
        for warning in data.get("warnings") or []:
            self.report_warning(warning, video_id)
        headers = dict(data.get("headers") or {})
        formats = []
        for f in data["formats"]:
            if "manifest" in f:  # DASH: the manifest read by yt-dlp's own MPD parser, as real extractors do
                found = self._extract_mpd_formats(urljoin(url, f["manifest"]), video_id, headers=headers)
                formats += [{**m, "http_headers": headers} for m in found]
            else:
                formats.append({**f, "url": urljoin(url, f["url"]), "http_headers": headers})
        subtitles: dict[str, list[dict[str, str]]] = {}
        automatic: dict[str, list[dict[str, str]]] = {}
        for track in data.get("captions") or []:  # as YouTube's extractor lists them: by language, each format
            listed = automatic if track["auto"] else subtitles
            listed.setdefault(track["lang"], []).append({"ext": track["ext"], "url": urljoin(url, track["url"])})
        return {
            "id": video_id,
            "title": data["title"],
            "duration": data.get("duration"),
            "formats": formats,
            "subtitles": subtitles,
            "automatic_captions": automatic,
        }


class YoutubeQuoteclipVideoSiteIE(QuoteclipVideoSiteIE):
    """The same site read as YouTube is: its key starts with "Youtube" (quoteclip names YouTube's refusals so)."""

    IE_NAME = "quoteclip:videosite:youtube"
    _VALID_URL = r"https?://127\.0\.0\.1:\d+/youtube/(?P<id>[\w-]+)"
