"""Settings: one frozen dataclass, built once from the environment in the entry point and passed down."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import embedded
from .errors import BadInput
from .spec import DEFAULT_MAX_SECONDS, EncoderPreset

DEFAULT_SOURCE_HOSTS = (
    "youtube.com",
    "youtu.be",
    "vimeo.com",
    "dailymotion.com",
    "twitch.tv",
    "x.com",
    "twitter.com",
)


def _float(env: Mapping[str, str], name: str, default: float, minimum: float = 0.0) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadInput(f"{name} must be a number, got {raw!r}") from None
    if not value >= minimum:
        raise BadInput(f"{name} must be at least {minimum:g}, got {raw!r}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise BadInput(f"{name} must be true or false, got {raw!r}")


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in env.get(name, "").split(",") if item.strip())


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


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "quoteclip"


def configured_redis_url(env: Mapping[str, str]) -> str | None:
    return env.get("QUOTECLIP_REDIS_URL") or env.get("REDIS_URL") or None


def _preset(value: str | None) -> EncoderPreset | None:
    """``QUOTECLIP_ENCODER_PRESET``: the x264 preset of final renders whose request names none."""
    from typing import get_args

    if not value:
        return None
    allowed = get_args(EncoderPreset)
    if value not in allowed:
        raise BadInput(f"QUOTECLIP_ENCODER_PRESET must be one of {', '.join(allowed)}, got {value[:40]!r}")
    return value  # type: ignore[return-value]


def _proxy(value: str | None) -> str | None:
    """``QUOTECLIP_PROXY``: an http:// proxy URL (host and port; user:password@ allowed)."""
    if not value:
        return None
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise BadInput("QUOTECLIP_PROXY must be a URL like http://proxy.internal:3128") from None
    if parts.scheme != "http" or not parts.hostname or port is None:
        raise BadInput("QUOTECLIP_PROXY must be a URL like http://proxy.internal:3128 (http, a host and a port)")
    return value


def _optional_bool(env: Mapping[str, str], name: str) -> bool | None:
    return None if not env.get(name) else _bool(env, name, False)


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
    min_fetch_rate: int = 32 * 1024  # bytes/s, averaged over a fetch that lasts over 30 s
    fetch_timeout: float = 20.0  # a source read that stalls this long fails
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
    rate_limit_per_minute: int = 120  # per API key (or per client address without keys)
    cors_origins: tuple[str, ...] = ()
    # Signs the expiring ?token= of links a browser opens (download, file). Unset: derived from the API keys.
    link_secret: str | None = field(default=None, repr=False)
    # Mixed into every clip key: clip URLs (public buckets) cannot be computed from a guessed request.
    key_secret: str | None = field(default=None, repr=False)
    # Proxies whose X-Forwarded-For / X-Forwarded-Proto the API trusts (addresses or networks); none by default.
    trusted_proxies: tuple[str, ...] = ()
    webhook_secret: str | None = field(default=None, repr=False)
    shutdown_grace: float = 120.0  # seconds a worker lets its current render finish after SIGTERM
    maintenance_interval: int = 60  # seconds between a worker's sweeps for abandoned jobs

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        hosts = env.get("QUOTECLIP_SOURCE_HOSTS")
        storage_dir = Path(env.get("QUOTECLIP_STORAGE_DIR") or "clips")
        return cls(
            storage_dir=storage_dir,
            # Configured, else the embedded server a running ``quoteclip up`` recorded, else the default address.
            redis_url=configured_redis_url(env) or embedded.recorded_url(storage_dir) or cls.redis_url,
            s3_endpoint=env.get("QUOTECLIP_S3_ENDPOINT") or None,
            s3_bucket=env.get("QUOTECLIP_S3_BUCKET") or None,
            s3_region=env.get("QUOTECLIP_S3_REGION") or cls.s3_region,
            aws_access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            link_ttl=int(_float(env, "QUOTECLIP_LINK_TTL", cls.link_ttl, minimum=1)),
            public_base_url=(env.get("QUOTECLIP_PUBLIC_BASE_URL") or "").rstrip("/") or None,
            source_hosts=tuple(h.strip().lower() for h in hosts.split(",") if h.strip()) if hosts else None,
            allow_local_sources=_optional_bool(env, "QUOTECLIP_ALLOW_LOCAL_SOURCES"),
            brand_dir=Path(env["QUOTECLIP_BRAND_DIR"]) if env.get("QUOTECLIP_BRAND_DIR") else None,
            allow_addresses=parse_networks(env.get("QUOTECLIP_ALLOW_ADDRESSES", "")),
            cache_dir=Path(env.get("QUOTECLIP_CACHE_DIR") or default_cache_dir(env) / "sources"),
            cache_max_bytes=int(_float(env, "QUOTECLIP_CACHE_MAX_MB", cls.cache_max_bytes / 1024**2, 1) * 1024**2),
            max_fetch_bytes=int(_float(env, "QUOTECLIP_MAX_FETCH_MB", cls.max_fetch_bytes / 1024**2, 1) * 1024**2),
            max_source_seconds=_float(env, "QUOTECLIP_MAX_SOURCE_SECONDS", cls.max_source_seconds, 1),
            fetch_timeout=_float(env, "QUOTECLIP_FETCH_TIMEOUT", cls.fetch_timeout, 0.1),
            ffmpeg_binary=env.get("FFMPEG_BINARY") or None,
            encoder_preset=_preset(env.get("QUOTECLIP_ENCODER_PRESET")),
            max_clip_seconds=_float(env, "QUOTECLIP_MAX_CLIP_SECONDS", DEFAULT_MAX_SECONDS, minimum=0.1),
            api_keys=_list(env, "QUOTECLIP_API_KEYS"),
            rate_limit_per_minute=int(_float(env, "QUOTECLIP_RATE_LIMIT", cls.rate_limit_per_minute, 1)),
            cors_origins=_list(env, "QUOTECLIP_CORS_ORIGINS"),
            link_secret=env.get("QUOTECLIP_LINK_SECRET") or None,
            key_secret=env.get("QUOTECLIP_KEY_SECRET") or None,
            trusted_proxies=parse_networks(env.get("QUOTECLIP_TRUSTED_PROXIES", ""), "QUOTECLIP_TRUSTED_PROXIES"),
            webhook_secret=env.get("QUOTECLIP_WEBHOOK_SECRET") or None,
            cookies_file=Path(env["QUOTECLIP_COOKIES_FILE"]) if env.get("QUOTECLIP_COOKIES_FILE") else None,
            extractor_args=tuple(env.get("QUOTECLIP_EXTRACTOR_ARGS", "").split()),
            extraction_ttl=_float(env, "QUOTECLIP_EXTRACTION_TTL", cls.extraction_ttl, 0),
            available_wait=_float(env, "QUOTECLIP_AVAILABLE_WAIT", cls.available_wait, 0),
            origin_concurrency=int(_float(env, "QUOTECLIP_ORIGIN_CONCURRENCY", cls.origin_concurrency, 1)),
            origin_rate=_float(env, "QUOTECLIP_ORIGIN_RATE", cls.origin_rate, 0),
            proxy=_proxy(env.get("QUOTECLIP_PROXY")),
            shutdown_grace=_float(env, "QUOTECLIP_SHUTDOWN_GRACE", cls.shutdown_grace),
            maintenance_interval=int(_float(env, "QUOTECLIP_MAINTENANCE_INTERVAL", cls.maintenance_interval, 1)),
        )

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
