"""Settings: every environment variable quoteclip reads is declared once, in ``DECLARED`` (its name, the Settings
field it fills, how its text is read, its default as users see it, one line of meaning). ``Settings.from_env`` reads
the table once, in the entry point, and the Settings are passed down; the few variables read elsewhere are read
through their declaration (``env_text``). ``python -m quoteclip.settings`` prints the configuration page
(docs/configuration.md) from the same table. Nothing here reads the environment at import."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_args

from . import embedded
from .errors import BadInput
from .spec import DEFAULT_MAX_SECONDS, EncoderPreset, WatermarkSpec

DEFAULT_SOURCE_HOSTS = (
    "youtube.com",
    "youtu.be",
    "vimeo.com",
    "dailymotion.com",
    "twitch.tv",
    "x.com",
    "twitter.com",
)

# The configuration page's sections, in its order; every declaration names one.
GROUPS = (
    "storage",
    "queue",
    "sources and fetching",
    "extraction",
    "rendering",
    "API and security",
    "signed links",
    "streaming",
    "webhooks",
    "workers",
    "logging",
    "command line",
)

# Parsers: (the variable's text, the variable's name) → the field's value; called only for a variable that is set and
# not empty. A bad value raises BadInput naming the variable (exit code 2).


def _text(text: str, name: str) -> str:
    return text


def _path(text: str, name: str) -> Path:
    return Path(text)


def _flag(text: str, name: str) -> bool:
    if text.lower() in {"1", "true", "yes", "on"}:
        return True
    if text.lower() in {"0", "false", "no", "off"}:
        return False
    raise BadInput(f"{name} must be true or false, got {text!r}")


def _items(text: str, name: str) -> tuple[str, ...]:
    """Comma-separated."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _hosts(text: str, name: str) -> tuple[str, ...]:
    return tuple(host.lower() for host in _items(text, name))


def _words(text: str, name: str) -> tuple[str, ...]:
    """Space-separated."""
    return tuple(text.split())


def _base_url(text: str, name: str) -> str | None:
    return text.rstrip("/") or None


def _service_url(text: str, name: str) -> str:
    """An http(s) address without a trailing slash, e.g. ``https://clips.example.com``."""
    from urllib.parse import urlsplit

    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise BadInput(f"{name} must be an http(s) address like https://clips.example.com, got {text[:80]!r}")
    return text.rstrip("/")


def _redis_url(text: str, name: str) -> str:
    """A Redis URL: ``redis://``, ``rediss://`` or ``unix://``."""
    if not text.startswith(("redis://", "rediss://", "unix://")):
        raise BadInput(f"{name} must be a Redis URL like redis://relay.internal:6379/0, got {text[:80]!r}")
    return text


def parse_networks(text: str, name: str = "QUOTECLIP_ALLOW_ADDRESSES") -> tuple[str, ...]:
    nets = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            nets.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise BadInput(f"{name} has {item!r}, which is not an IP address or network") from None
    return tuple(nets)


def _preset(text: str, name: str) -> EncoderPreset:
    allowed = get_args(EncoderPreset)
    if text not in allowed:
        raise BadInput(f"{name} must be one of {', '.join(allowed)}, got {text[:40]!r}")
    return text  # type: ignore[return-value]


def _proxy(text: str, name: str) -> str:
    """An http:// proxy URL (host and port; user:password@ allowed)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise BadInput(f"{name} must be a URL like http://proxy.internal:3128") from None
    if parts.scheme != "http" or not parts.hostname or port is None:
        raise BadInput(f"{name} must be a URL like http://proxy.internal:3128 (http, a host and a port)")
    return text


@dataclass(frozen=True)
class SiteKey:
    """A website's key for signed clip links: an id and a secret, and what a leaked link must not change: the
    ``brand`` every clip of the key carries (a watermark, whatever the link names), the source ``hosts`` its links
    may clip, the longest clip, and how long its links live (``lifetime`` seconds; None: they do not expire)."""

    id: str
    secret: str = field(repr=False)
    brand: WatermarkSpec | None = None
    hosts: tuple[str, ...] | None = None
    max_seconds: float | None = None
    lifetime: int | None = None


_KEY_FIELDS = {"id", "secret", "brand", "hosts", "max_seconds", "lifetime"}


def _site_key(entry: object, where: str) -> SiteKey:
    from .links import KEY_ID

    if not isinstance(entry, Mapping) or set(entry) - _KEY_FIELDS:
        raise BadInput(f"{where} must be an object with {', '.join(sorted(_KEY_FIELDS))}")
    key_id, secret = entry.get("id"), entry.get("secret")
    if not isinstance(key_id, str) or not KEY_ID.match(key_id):
        raise BadInput(f"{where}: id must be 1-64 letters, digits, - or _, got {key_id!r}")
    if not isinstance(secret, str) or len(secret) < 16:
        raise BadInput(f"{where} ({key_id}): secret must be text of at least 16 characters")
    brand, hosts = entry.get("brand"), entry.get("hosts")
    most, lifetime = entry.get("max_seconds"), entry.get("lifetime")
    try:
        mark = (
            None
            if brand is None
            else WatermarkSpec.model_validate({"text": brand} if isinstance(brand, str) else brand)
        )
    except ValueError as exc:
        raise BadInput(f"{where} ({key_id}): brand is not a watermark ({str(exc).splitlines()[-1].strip()})") from None
    if hosts is not None and (not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts)):
        raise BadInput(f"{where} ({key_id}): hosts must be a list of host names")
    for name, value in (("max_seconds", most), ("lifetime", lifetime)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            raise BadInput(f"{where} ({key_id}): {name} must be a number of seconds above 0, got {value!r}")
    return SiteKey(
        key_id,
        secret,
        mark,
        None if hosts is None else tuple(h.lower() for h in hosts),
        None if most is None else float(most),
        None if lifetime is None else int(lifetime),
    )


def _site_keys(text: str, name: str) -> tuple[SiteKey, ...]:
    """``ID:SECRET[,ID:SECRET…]``: keys without scopes."""
    keys = []
    for item in _items(text, name):
        key_id, _, secret = item.partition(":")
        keys.append(_site_key({"id": key_id, "secret": secret}, f"{name} entry {key_id[:64]!r}"))
    return _distinct(keys, name)


def _site_keys_file(text: str, name: str) -> tuple[SiteKey, ...]:
    """A JSON file: ``{"keys": [{"id", "secret", "brand", "hosts", "max_seconds", "lifetime"}, …]}``."""
    import json

    try:
        data = json.loads(Path(text).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"{name} names {text!r}, which cannot be read ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"{name} names {text!r}, which is not JSON ({exc})") from None
    if not isinstance(data, Mapping) or set(data) != {"keys"} or not isinstance(data["keys"], list):
        raise BadInput(f'{name} names {text!r}, which must hold {{"keys": [{{"id": …, "secret": …}}, …]}}')
    return _distinct([_site_key(entry, f"{name} key {n + 1}") for n, entry in enumerate(data["keys"])], name)


def _distinct(keys: list[SiteKey], name: str) -> tuple[SiteKey, ...]:
    seen = [key.id for key in keys]
    twice = sorted({key_id for key_id in seen if seen.count(key_id) > 1})
    if twice:
        raise BadInput(f"{name} names the key {twice[0]!r} twice")
    return tuple(keys)


def _shown_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


class _Number:
    """A number of at least ``minimum``, counted in ``unit``s of the field's (MB: 1024**2 bytes); ``whole``: the
    field is an int."""

    __slots__ = ("minimum", "unit", "whole")

    def __init__(self, minimum: float = 0.0, *, unit: int = 1, whole: bool = False) -> None:
        self.minimum, self.unit, self.whole = minimum, unit, whole

    def __call__(self, text: str, name: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise BadInput(f"{name} must be a number, got {text!r}") from None
        if not value >= self.minimum:
            raise BadInput(f"{name} must be at least {self.minimum:g}, got {text!r}")
        return int(value * self.unit) if self.whole else value * self.unit

    def show(self, value: float) -> str:
        return _shown_number(value / self.unit)


class Setting:
    """One environment variable: ``name`` (and ``also``, read in turn when it is unset or empty), the Settings
    ``field`` it fills through ``parse`` (None: read where ``read_by`` says, through ``env_text``), its ``default``
    as users see it (None: the field's own default, shown by the parser), its one line of ``meaning``, and its
    ``group`` on the configuration page."""

    __slots__ = ("name", "meaning", "group", "field", "parse", "default", "also", "read_by")

    def __init__(
        self,
        name: str,
        meaning: str,
        *,
        group: str,
        field: str | None = None,
        parse: Callable[[str, str], Any] = _text,
        default: str | None = None,
        also: tuple[str, ...] = (),
        read_by: str = "quoteclip.settings",
    ) -> None:
        self.name, self.meaning, self.group, self.field = name, meaning, group, field
        self.parse, self.default, self.also, self.read_by = parse, default, also, read_by

    def __repr__(self) -> str:
        return f"Setting({self.name!r})"

    def text(self, env: Mapping[str, str]) -> str | None:
        """The first of the variable and its fallbacks that is set and not empty."""
        for name in (self.name, *self.also):
            if text := env.get(name):
                return text
        return None


_PRESETS = ", ".join(f"`{p}`" for p in get_args(EncoderPreset))
_QUEUE_HOSTS = ", ".join(DEFAULT_SOURCE_HOSTS)

DECLARED: tuple[Setting, ...] = (
    # storage
    Setting(
        "QUOTECLIP_STORAGE_DIR",
        "the local clip folder (used when no S3 bucket is set)",
        group="storage",
        field="storage_dir",
        parse=_path,
        default="`clips` in the working directory",
    ),
    Setting(
        "QUOTECLIP_S3_ENDPOINT",
        "an S3-compatible store's endpoint URL",
        group="storage",
        field="s3_endpoint",
        default="none (AWS S3)",
    ),
    Setting(
        "QUOTECLIP_S3_BUCKET",
        "the bucket clips are stored in; setting it turns S3 storage on",
        group="storage",
        field="s3_bucket",
        default="none (the local clip folder)",
    ),
    Setting("QUOTECLIP_S3_REGION", "the bucket's region", group="storage", field="s3_region"),
    Setting(
        "AWS_ACCESS_KEY_ID",
        "S3 credentials: the access key",
        group="storage",
        field="aws_access_key_id",
        default="boto3's usual chain",
    ),
    Setting(
        "AWS_SECRET_ACCESS_KEY",
        "S3 credentials: the secret key",
        group="storage",
        field="aws_secret_access_key",
        default="boto3's usual chain",
    ),
    Setting(
        "QUOTECLIP_LINK_TTL",
        "lifetime of a clip's links (presigned S3 links, signed download and file links), seconds",
        group="storage",
        field="link_ttl",
        parse=_Number(1, whole=True),
    ),
    Setting(
        "QUOTECLIP_PUBLIC_BASE_URL",
        "S3 storage: return public URLs under this base (a public bucket or a CDN) instead of presigned links",
        group="storage",
        field="public_base_url",
        parse=_base_url,
    ),
    # queue
    Setting(
        "QUOTECLIP_REDIS_URL",
        "Redis for the queue",
        group="queue",
        field="redis_url",
        also=("REDIS_URL",),
        default="the embedded server a running `quoteclip up` recorded under the clip folder, "
        "else `redis://127.0.0.1:6379/0`",
    ),
    # sources and fetching
    Setting(
        "QUOTECLIP_SOURCE_HOSTS",
        "hosts remote sources may come from, comma-separated; `*` for any public host",
        group="sources and fetching",
        field="source_hosts",
        parse=_hosts,
        default=f"command line: any; queue: {_QUEUE_HOSTS}",
    ),
    Setting(
        "QUOTECLIP_ALLOW_LOCAL_SOURCES",
        "allow local paths as sources (`true` or `false`)",
        group="sources and fetching",
        field="allow_local_sources",
        parse=_flag,
        default="command line: yes; queue: no",
    ),
    Setting(
        "QUOTECLIP_ALLOW_ADDRESSES",
        "private or loopback networks sources may resolve to, comma-separated (e.g. `127.0.0.1`); never metadata "
        "addresses",
        group="sources and fetching",
        field="allow_addresses",
        parse=parse_networks,
    ),
    Setting(
        "QUOTECLIP_CACHE_DIR",
        "the source block cache's folder",
        group="sources and fetching",
        field="cache_dir",
        parse=_path,
        default="`quoteclip/sources` in the user's cache folder (`~/.cache/quoteclip/sources`)",
    ),
    Setting(
        "QUOTECLIP_CACHE_MAX_MB",
        "the source block cache's size, MB",
        group="sources and fetching",
        field="cache_max_bytes",
        parse=_Number(1, unit=1024**2, whole=True),
    ),
    Setting(
        "XDG_CACHE_HOME",
        "the user's cache folder; quoteclip's is `quoteclip` in it (the block cache, ffmpeg's version, the demo's "
        "video)",
        group="sources and fetching",
        default="`~/.cache`",
    ),
    Setting(
        "QUOTECLIP_MAX_FETCH_MB",
        "most a job fetches from its sources, MB",
        group="sources and fetching",
        field="max_fetch_bytes",
        parse=_Number(1, unit=1024**2, whole=True),
    ),
    Setting(
        "QUOTECLIP_FETCH_TIMEOUT",
        "a source read that stalls this many seconds fails",
        group="sources and fetching",
        field="fetch_timeout",
        parse=_Number(0.1),
    ),
    Setting(
        "QUOTECLIP_FETCH_HEADER_TIMEOUT",
        "a source request (media, playlist, segment) whose response headers are not all in within this many seconds "
        "fails",
        group="sources and fetching",
        field="fetch_header_timeout",
        parse=_Number(0.1),
    ),
    Setting(
        "QUOTECLIP_MIN_FETCH_RATE",
        "a source request averaging under this many KB/s, counted from the request (the wait for its headers "
        "included), fails once `QUOTECLIP_FETCH_RATE_GRACE` has passed",
        group="sources and fetching",
        field="min_fetch_rate",
        parse=_Number(1, unit=1024, whole=True),
    ),
    Setting(
        "QUOTECLIP_FETCH_RATE_GRACE",
        "seconds a source request may run before `QUOTECLIP_MIN_FETCH_RATE` applies",
        group="sources and fetching",
        field="fetch_rate_grace",
        parse=_Number(0),
    ),
    Setting(
        "QUOTECLIP_MAX_SOURCE_SECONDS",
        "longest source, seconds",
        group="sources and fetching",
        field="max_source_seconds",
        parse=_Number(1),
    ),
    Setting(
        "QUOTECLIP_ORIGIN_CONCURRENCY",
        "requests in flight to one origin host from one job at most",
        group="sources and fetching",
        field="origin_concurrency",
        parse=_Number(1, whole=True),
    ),
    Setting(
        "QUOTECLIP_ORIGIN_RATE",
        "requests a second to one origin host from one job at most (0: no limit)",
        group="sources and fetching",
        field="origin_rate",
        parse=_Number(0),
    ),
    Setting(
        "QUOTECLIP_PROXY",
        "one http:// proxy (a host and a port; `user:password@` allowed) for everything sources fetch, pages and "
        "media; the address rules still apply to what quoteclip asks it for",
        group="sources and fetching",
        field="proxy",
        parse=_proxy,
    ),
    # extraction
    Setting(
        "QUOTECLIP_COOKIES_FILE",
        "a Netscape cookies file for yt-dlp (signed-in pages, bot checks); each job reads a private copy, the file "
        "itself is never rewritten and never goes to Redis",
        group="extraction",
        field="cookies_file",
        parse=_path,
    ),
    Setting(
        "QUOTECLIP_EXTRACTOR_ARGS",
        "yt-dlp `--extractor-args` values, space-separated (e.g. "
        "`youtube:player_client=default,mweb;po_token=web.gvs+TOKEN`)",
        group="extraction",
        field="extractor_args",
        parse=_words,
    ),
    Setting(
        "QUOTECLIP_EXTRACTION_TTL",
        "longest a page's extraction (its media URLs) is reused by the jobs of that page, seconds; never past its "
        "URLs' `expire=`",
        group="extraction",
        field="extraction_ttl",
        parse=_Number(0),
    ),
    Setting(
        "QUOTECLIP_AVAILABLE_WAIT",
        "longest a job waits for a format the site makes available later (`available_at`), seconds",
        group="extraction",
        field="available_wait",
        parse=_Number(0),
    ),
    Setting(
        "QUOTECLIP_PAGE_MAX_MB",
        "most one response yt-dlp reads (a page, a script, a manifest) may give once decompressed, MB",
        group="extraction",
        parse=_Number(0.001, unit=1024**2, whole=True),
        default="32",
        read_by="sources.egress",
    ),
    Setting(
        "QUOTECLIP_PAGE_TIMEOUT",
        "most seconds one request yt-dlp makes may take, from connecting to the response's last byte",
        group="extraction",
        parse=_Number(0.1),
        default="60",
        read_by="sources.egress",
    ),
    Setting(
        "QUOTECLIP_PAGE_STALL",
        "a request yt-dlp makes fails when its server sends nothing for this many seconds (connecting included)",
        group="extraction",
        parse=_Number(0.1),
        default="20",
        read_by="sources.egress",
    ),
    Setting(
        "QUOTECLIP_PAGE_MIN_RATE",
        "KB/s a request yt-dlp makes must average once it has run `QUOTECLIP_PAGE_STALL` seconds",
        group="extraction",
        parse=_Number(0, unit=1024),
        default="4",
        read_by="sources.egress",
    ),
    # rendering
    Setting(
        "QUOTECLIP_MAX_CLIP_SECONDS",
        "longest clip, seconds",
        group="rendering",
        field="max_clip_seconds",
        parse=_Number(0.1),
    ),
    Setting(
        "QUOTECLIP_ENCODER_PRESET",
        f"x264 preset of final renders whose request names none: {_PRESETS}",
        group="rendering",
        field="encoder_preset",
        parse=_preset,
        default="`veryfast`",
    ),
    Setting(
        "QUOTECLIP_BRAND_DIR",
        "the operator's brand files (logos, fonts), named in specs as `brand:NAME`",
        group="rendering",
        field="brand_dir",
        parse=_path,
    ),
    Setting(
        "FFMPEG_BINARY",
        "another ffmpeg (a path, or a command on the PATH); the version of each binary (for the manifest) is asked "
        "once and remembered in the cache folder's `ffmpeg-versions.json`",
        group="rendering",
        field="ffmpeg_binary",
        default="the imageio-ffmpeg wheel's binary, found by its path without a check run",
    ),
    Setting(
        "IMAGEIO_FFMPEG_EXE",
        "imageio-ffmpeg's own choice of ffmpeg: when set (and `FFMPEG_BINARY` is not), imageio-ffmpeg's lookup decides",
        group="rendering",
        read_by="renderer.ffmpeg",
        default="the wheel's binary",
    ),
    # API and security
    Setting(
        "QUOTECLIP_API_KEYS",
        "API keys, comma-separated; with keys set, every route needs one (`Authorization: Bearer KEY`)",
        group="API and security",
        field="api_keys",
        parse=_items,
        default="none (no key needed)",
    ),
    Setting(
        "QUOTECLIP_RATE_LIMIT",
        "clips a minute a client may ask for, per API key (per client address without keys): a clip request counts "
        "its profiles, a batch its quotes × profiles, a preview or an upload 1",
        group="API and security",
        field="rate_limit_per_minute",
        parse=_Number(1, whole=True),
    ),
    Setting(
        "QUOTECLIP_AUTH_FAILURE_LIMIT",
        "failed authentications (a wrong key or link token) a minute from one client address; past it, every keyed "
        "route answers that address 429 until the minute has passed",
        group="API and security",
        field="auth_failures_per_minute",
        parse=_Number(1, whole=True),
    ),
    Setting(
        "QUOTECLIP_CORS_ORIGINS",
        "browser origins allowed to call the API, comma-separated",
        group="API and security",
        field="cors_origins",
        parse=_items,
    ),
    Setting(
        "QUOTECLIP_LINK_SECRET",
        "signs the expiring `?token=` of the download and file links a browser opens",
        group="API and security",
        field="link_secret",
        default="derived from the API keys",
    ),
    Setting(
        "QUOTECLIP_KEY_SECRET",
        "mixed into every clip key, so clip URLs (public buckets) cannot be computed from a guessed request",
        group="API and security",
        field="key_secret",
    ),
    Setting(
        "QUOTECLIP_TRUSTED_PROXIES",
        "proxies whose `X-Forwarded-For` and `X-Forwarded-Proto` the API trusts: addresses or networks, "
        "comma-separated",
        group="API and security",
        field="trusted_proxies",
        parse=parse_networks,
    ),
    # signed links
    Setting(
        "QUOTECLIP_SITE_KEYS",
        "websites' keys for signed clip links, `ID:SECRET[,ID:SECRET…]` (secrets of at least 16 characters); with "
        "none, the link routes do not exist; a key removed revokes its links (purge a CDN's copies of them: see the "
        "websites page)",
        group="signed links",
        field="site_keys",
        parse=_site_keys,
        default="none",
    ),
    Setting(
        "QUOTECLIP_SITE_KEYS_FILE",
        'a JSON file of site keys with scopes: `{"keys": [{"id", "secret", "brand", "hosts", "max_seconds", '
        '"lifetime"}]}` (see the websites page)',
        group="signed links",
        field="site_key_scopes",
        parse=_site_keys_file,
        default="none",
    ),
    Setting(
        "QUOTECLIP_LINK_BASE_URL",
        "the service's address as pages reach it, which `quoteclip sign` puts before a link's path",
        group="signed links",
        field="link_base_url",
        parse=_service_url,
        default="none (links start with /l/)",
    ),
    Setting(
        "QUOTECLIP_LINK_HOLD",
        "seconds a signed link's request for a clip or poster not yet stored waits while it renders (under a "
        "CDN's origin timeout): for the clip's stream to begin, or for a download, a poster (or anything, with "
        "streaming off) to be stored; then it is answered `503` with `Retry-After`",
        group="signed links",
        field="link_hold",
        parse=_Number(0.0),
    ),
    Setting(
        "QUOTECLIP_LINK_RENDERS",
        "renders a minute each site key's links may start (a clip or a poster counts one; a stored one answered "
        "counts none); over it, `429` with `Retry-After`",
        group="signed links",
        field="link_renders_per_minute",
        parse=_Number(1, whole=True),
    ),
    # streaming
    Setting(
        "QUOTECLIP_STREAM",
        "stream a clip while it renders: a signed link's (and the page's) request for a clip not yet stored is "
        "answered with the clip's fragments as the worker encodes them, instead of being held until it is stored "
        "(`true` or `false`; read by the workers, which relay the fragments, and by the API, which answers with them)",
        group="streaming",
        field="stream",
        parse=_flag,
        default="`true`",
    ),
    Setting(
        "QUOTECLIP_STREAM_REDIS_URL",
        "the Redis the workers relay a rendering clip's fragments through to the API: one without persistence, "
        "with a `maxmemory`, apart from the queue's (see the streaming page)",
        group="streaming",
        field="stream_redis_url",
        parse=_redis_url,
        default="the queue's (`QUOTECLIP_REDIS_URL`)",
    ),
    Setting(
        "QUOTECLIP_STREAM_MAX_MB",
        "most of one clip's fragments the relay holds at once, MB; past it the oldest are dropped: viewers already "
        "streaming go on, later ones wait for the stored clip",
        group="streaming",
        field="stream_max_bytes",
        parse=_Number(1, unit=1024**2, whole=True),
    ),
    # webhooks
    Setting(
        "QUOTECLIP_WEBHOOK_SECRET",
        "signs webhooks (Standard Webhooks; `whsec_…` or any text)",
        group="webhooks",
        field="webhook_secret",
        default="unsigned",
    ),
    Setting(
        "QUOTECLIP_WEBHOOK_TIMEOUT",
        "seconds a webhook delivery may take in all: connecting, sending, and the receiver's status line and headers",
        group="webhooks",
        field="webhook_timeout",
        parse=_Number(0.1),
    ),
    Setting(
        "QUOTECLIP_WEBHOOK_CONCURRENCY",
        "deliveries one webhook worker (`quoteclip worker --webhooks`) makes at once",
        group="webhooks",
        field="webhook_concurrency",
        parse=_Number(1, whole=True),
    ),
    # workers
    Setting(
        "QUOTECLIP_SHUTDOWN_GRACE",
        "seconds a worker lets its current render finish after SIGTERM",
        group="workers",
        field="shutdown_grace",
        parse=_Number(0),
    ),
    Setting(
        "QUOTECLIP_MAINTENANCE_INTERVAL",
        "seconds between a worker's sweeps for abandoned jobs",
        group="workers",
        field="maintenance_interval",
        parse=_Number(1, whole=True),
    ),
    Setting(
        "QUOTECLIP_WORKER_LEASE",
        "seconds a worker's lease in Redis lasts unrenewed (it renews it every third of that): a job whose worker's "
        "lease lapsed goes back to the queue, taken by another worker",
        group="workers",
        field="worker_lease",
        parse=_Number(3),
    ),
    Setting(
        "QUOTECLIP_MAX_DEATHS",
        "a clip's job fails when this many of its workers died running it (killed, out of memory: an input that "
        "kills every worker it meets); until then it goes back to the queue, and these never spend an attempt",
        group="workers",
        field="max_deaths",
        parse=_Number(1, whole=True),
    ),
    Setting(
        "QUOTECLIP_MAX_HANDBACKS",
        "a clip's job fails when this many workers' machines failed it (full disk, no memory, no working ffmpeg); "
        "until then it goes back to the queue for another worker, and these never spend an attempt",
        group="workers",
        field="max_handbacks",
        parse=_Number(1, whole=True),
    ),
    Setting(
        "QUOTECLIP_MIN_FREE_MB",
        "free space a worker needs on its temp folder and on its source cache folder to take a job (a job needs "
        "room for its clips too)",
        group="workers",
        field="min_free_bytes",
        parse=_Number(0, unit=1024**2, whole=True),
    ),
    Setting(
        "QUOTECLIP_MIN_FREE_MEMORY_MB",
        "memory a worker needs available (the machine's, or its container's) to take a job",
        group="workers",
        field="min_free_memory",
        parse=_Number(0, unit=1024**2, whole=True),
    ),
    Setting(
        "QUOTECLIP_SICK_PAUSE",
        "seconds a worker takes no job after its machine failed one; then it takes jobs again once its disk, "
        "memory and ffmpeg pass their checks",
        group="workers",
        field="sick_pause",
        parse=_Number(0),
    ),
    # logging
    Setting(
        "QUOTECLIP_LOG_FORMAT",
        "the worker's and the API's log lines: `text`, or `json` (one object a line)",
        group="logging",
        read_by="quoteclip.logs",
        default="`text`",
    ),
    # command line
    Setting(
        "QUOTECLIP_DEBUG",
        "set (to anything): a command's unexpected error shows its traceback instead of one line",
        group="command line",
        read_by="cli",
        default="unset",
    ),
    Setting(
        "PYDANTIC_DISABLE_PLUGINS",
        "the `quoteclip` command sets it to `__all__` when unset (pydantic's search of every installed package for "
        "plugins is a slice of each command's start-up); set it empty to let pydantic plugins load",
        group="command line",
        read_by="cli",
        default="`__all__`",
    ),
)

_BY_NAME = {setting.name: setting for setting in DECLARED}


def env_text(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The text of the declared variable ``name`` (or of a fallback it declares), None when unset or empty; an
    undeclared name is a KeyError."""
    return _BY_NAME[name].text(os.environ if env is None else env)


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    return Path(env_text("XDG_CACHE_HOME", env) or Path.home() / ".cache") / "quoteclip"


def configured_redis_url(env: Mapping[str, str]) -> str | None:
    return env_text("QUOTECLIP_REDIS_URL", env)


@dataclass(frozen=True)
class Settings:
    storage_dir: Path = Path("clips")
    redis_url: str = "redis://127.0.0.1:6379/0"
    s3_endpoint: str | None = None
    s3_bucket: str | None = None
    s3_region: str = "us-east-1"
    aws_access_key_id: str | None = field(default=None, repr=False)
    aws_secret_access_key: str | None = field(default=None, repr=False)
    link_ttl: int = 3600
    public_base_url: str | None = None
    # Hosts remote sources may come from ("*": any public host). None: any for the CLI, the defaults for the queue.
    source_hosts: tuple[str, ...] | None = None
    # None: allowed for the CLI, refused for queued jobs (a website must not make a worker read its disk).
    allow_local_sources: bool | None = None
    # The operator's brand files (logos, fonts), named in specs as brand:NAME. None: no brand files.
    brand_dir: Path | None = None
    # Networks a source may resolve to although private or loopback (tests: 127.0.0.1/32). Never metadata.
    allow_addresses: tuple[str, ...] = ()
    cache_dir: Path = field(default_factory=lambda: default_cache_dir() / "sources")
    cache_max_bytes: int = 2 * 1024**3
    max_fetch_bytes: int = 1024**3  # per job
    min_fetch_rate: int = 32 * 1024  # bytes/s, averaged over a request from its start, once fetch_rate_grace passed
    fetch_timeout: float = 20.0  # a source read that stalls this long fails
    fetch_header_timeout: float = 20.0  # a source request whose response headers take longer fails
    fetch_rate_grace: float = 30.0  # seconds a request may run before min_fetch_rate applies
    cookies_file: Path | None = None  # a Netscape cookies file for yt-dlp (each job reads a copy of it)
    extractor_args: tuple[str, ...] = ()  # yt-dlp --extractor-args values (player clients, PO-token settings)
    # A page's extraction (its media URLs) is reused by every job of that page for at most this many seconds, and
    # never past the URLs' own expiry.
    extraction_ttl: float = 3600.0
    available_wait: float = 60.0  # seconds a job waits for a format the site makes available later (available_at)
    origin_concurrency: int = 4  # requests in flight to one origin host from one job at most
    origin_rate: float = 0.0  # requests a second to one origin host from one job at most (0: no limit)
    # One HTTP proxy for everything sources fetch (yt-dlp's pages and the media), so extraction and fetches leave
    # from one address. The address rules still apply to what quoteclip asks it for.
    proxy: str | None = field(default=None, repr=False)
    max_source_seconds: float = 6 * 3600
    max_frame_pixels: int = 8192 * 8192
    max_streams: int = 8
    ffmpeg_binary: str | None = None
    encoder_preset: EncoderPreset | None = None  # for requests that name none; None: the product's (veryfast)
    max_clip_seconds: float = DEFAULT_MAX_SECONDS
    # A render may take this many seconds per second of clip, plus a fixed allowance.
    render_timeout_factor: float = 20.0
    render_timeout_base: float = 60.0
    queue_name: str = "quoteclip"
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    rate_limit_per_minute: int = 600  # clips a minute per API key (or per client address without keys)
    auth_failures_per_minute: int = 30  # failed authentications a minute from one client address
    cors_origins: tuple[str, ...] = ()
    # Signs the expiring ?token= of links a browser opens (download, file). Unset: derived from the API keys.
    link_secret: str | None = field(default=None, repr=False)
    # Mixed into every clip key: clip URLs (public buckets) cannot be computed from a guessed request.
    key_secret: str | None = field(default=None, repr=False)
    # Proxies whose X-Forwarded-For / X-Forwarded-Proto the API trusts (addresses or networks); none by default.
    trusted_proxies: tuple[str, ...] = ()
    # Websites' keys for signed links (QUOTECLIP_SITE_KEYS, and the scoped ones of QUOTECLIP_SITE_KEYS_FILE).
    site_keys: tuple[SiteKey, ...] = field(default=(), repr=False)
    site_key_scopes: tuple[SiteKey, ...] = field(default=(), repr=False)
    link_base_url: str | None = None
    link_hold: float = 25.0  # seconds a link's request waits for its render (a CDN's origin timeout is about 30 s)
    link_renders_per_minute: int = 60  # renders a site key's links may start a minute
    stream: bool = True  # a clip not yet stored is streamed to its viewers while it renders (jobs/relay.py)
    stream_redis_url: str | None = None  # the relay's Redis; None: the queue's
    stream_max_bytes: int = 96 * 1024**2  # most of one clip's fragments the relay holds
    webhook_secret: str | None = field(default=None, repr=False)
    webhook_timeout: float = 10.0  # seconds a delivery may take in all (connect, send, status line and headers)
    webhook_concurrency: int = 16  # deliveries one webhook worker makes at once
    shutdown_grace: float = 120.0  # seconds a worker lets its current render finish after SIGTERM
    maintenance_interval: int = 60  # seconds between a worker's sweeps for abandoned jobs
    worker_lease: float = 15.0  # seconds a worker's lease lasts unrenewed; then its job goes back to the queue
    max_deaths: int = 3  # workers a clip's job may lose (killed mid-job) before it fails
    max_handbacks: int = 3  # hand-backs by workers whose machine failed the job before it fails
    min_free_bytes: int = 512 * 1024**2  # on the temp and source cache folders, to take a job
    min_free_memory: int = 256 * 1024**2  # available memory, to take a job
    sick_pause: float = 30.0  # seconds a worker takes no job after its machine failed one

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every declared variable that fills a field, read and checked; an unset or empty one leaves the default."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for setting in DECLARED:
            if setting.field is not None and (text := setting.text(env)) is not None:
                values[setting.field] = setting.parse(text, setting.name)
        storage_dir = values.setdefault("storage_dir", cls.storage_dir)
        if "redis_url" not in values:  # else the embedded server a running ``quoteclip up`` recorded, else the default
            values["redis_url"] = embedded.recorded_url(storage_dir) or cls.redis_url
        values.setdefault("cache_dir", default_cache_dir(env) / "sources")
        return cls(**values)

    def sites(self) -> dict[str, SiteKey]:
        """Every site key by its id (listed and scoped ones together; an id named in both is refused)."""
        return {
            key.id: key for key in _distinct([*self.site_keys, *self.site_key_scopes], "QUOTECLIP_SITE_KEYS(_FILE)")
        }

    @property
    def uses_s3(self) -> bool:
        return self.s3_bucket is not None

    def for_cli(self) -> Settings:
        """The operator's own command line: local paths and any public host, unless the environment says otherwise."""
        return replace(
            self,
            allow_local_sources=self.allow_local_sources is not False,
            source_hosts=self.source_hosts if self.source_hosts is not None else ("*",),
        )

    def for_queue(self) -> Settings:
        """Queued jobs come from websites: no local paths and only the default hosts, unless configured."""
        return replace(
            self,
            allow_local_sources=self.allow_local_sources is True,
            source_hosts=self.source_hosts if self.source_hosts is not None else DEFAULT_SOURCE_HOSTS,
        )

    def render_timeout(self, clip_seconds: float) -> float:
        return self.render_timeout_base + self.render_timeout_factor * clip_seconds


def shown_default(setting: Setting) -> str:
    """The default as the configuration page shows it: the declaration's words, else the field's own default."""
    if setting.default is not None:
        return setting.default
    if setting.field is None:
        raise ValueError(f"{setting.name} fills no field, so its declaration must say its default")
    value = {f.name: f.default for f in fields(Settings)}[setting.field]
    show = getattr(setting.parse, "show", None)
    if show is not None:
        return str(show(value))
    if value is None or value == ():
        return "none"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _shown_number(value)
    return f"`{value}`"


def configuration_page() -> str:
    """docs/configuration.md: the declarations, section by section."""
    lines = [
        "# Configuration",
        "",
        "quoteclip is configured by environment variables, read once when a command, a worker or the API starts.",
        "An empty variable counts as unset, unless its line says otherwise.",
        "A bad value is refused with exit code 2 naming the variable "
        "(`QUOTECLIP_LINK_TTL must be a number, got 'soon'`).",
        "",
        "This page is generated from the declarations in `quoteclip/settings.py` by "
        "`python -m quoteclip.settings > docs/configuration.md`: change the declarations, then run it again.",
    ]
    for setting in DECLARED:
        if setting.group not in GROUPS:
            raise ValueError(f"{setting.name}: no section {setting.group!r} (GROUPS)")
    for group in GROUPS:
        rows = [setting for setting in DECLARED if setting.group == group]
        if not rows:
            continue
        lines += ["", f"## {group[0].upper()}{group[1:]}", "", "| variable | meaning | default |", "|---|---|---|"]
        for setting in rows:
            names = f"`{setting.name}`" + "".join(f" (or `{other}`)" for other in setting.also)
            cells = (names, setting.meaning, shown_default(setting))
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(configuration_page())
