"""Settings: every environment variable quoteclip reads is declared once. A variable that fills a field of
``Settings`` is declared on that field (``_setting``: its name and fallbacks, the field's type and default, how its
text is read, its default as users see it, one line of meaning, its group on the configuration page); one read by
another part (``read_by``) is declared in ``ELSEWHERE``; a field no variable fills says why (``_fixed``).
``DECLARED`` lists them all. ``Settings.from_env`` reads the environment once, in the entry point, and the Settings
are passed down; the few variables read elsewhere are read through their declaration (``env_text``).
``python -m quoteclip.settings`` prints the configuration page (docs/configuration.md) from the same declarations.
Nothing here reads the environment at import."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import embedded
from .errors import BadInput
from .links import MAX_LIFETIME
from .redis_url import check as check_redis_url
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
    """A Redis URL: a server's (``redis://``, ``rediss://``, ``unix://``) or a Sentinel set's
    (``redis+sentinel://HOST:PORT[,…]/SERVICE_NAME[/DB]``)."""
    return check_redis_url(text, name)


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")


def loopback_hint(host: str) -> str:
    """What to set for a refused loopback source (a local web server), else nothing."""
    return (
        "; for a server on this machine: QUOTECLIP_ALLOW_LOOPBACK=true"
        if host.lower().strip("[]") in LOOPBACK_HOSTS
        else ""
    )


def _joined(first: tuple[str, ...], more: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*first, *more)))


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


def _format_family(text: str, name: str) -> str:
    if text.lower() not in ("auto", "hls"):
        raise BadInput(f"{name} must be auto or hls, got {text[:40]!r}")
    return text.lower()


def _event_loop(text: str, name: str) -> str:
    if text.lower() not in ("asyncio", "uvloop"):
        raise BadInput(f"{name} must be asyncio or uvloop, got {text[:40]!r}")
    return text.lower()


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
    """A website's key for signed clip links: a site id and a secret, and what a leaked link must not change: the
    ``brand`` every clip of the key carries (a watermark, whatever the link names), the source ``hosts`` its links
    may clip, the longest clip, and how long its links live (``lifetime`` seconds; None: they do not expire).

    A site may have several live secrets under key ids (rotation): ``secret`` and ``key_id`` are the one listed
    first, which signs by default (``key_id`` None: the key listed without an id, whose links name the site
    alone), ``others`` the rest, in the order listed (their links stay valid until they are removed)."""

    id: str
    secret: str = field(repr=False)
    brand: WatermarkSpec | None = None
    hosts: tuple[str, ...] | None = None
    max_seconds: float | None = None
    lifetime: int | None = None
    key_id: str | None = None
    others: tuple[tuple[str | None, str], ...] = field(default=(), repr=False)

    def keys(self) -> tuple[tuple[str | None, str], ...]:
        """Every live (key id, secret) of the site, the one that signs by default first."""
        return ((self.key_id, self.secret), *self.others)

    def secret_of(self, key_id: str | None) -> str | None:
        return next((secret for kid, secret in self.keys() if kid == key_id), None)

    def signers(self) -> dict[str, str]:
        """Each live key's secret by the signer segment its links carry (``site`` or ``site.keyid``)."""
        return {self.id if kid is None else f"{self.id}.{kid}": secret for kid, secret in self.keys()}


_KEY_ID = r"^[A-Za-z0-9_-]{1,64}$"  # quoteclip/links.py KEY_ID: a site id, and a key id
_SECONDS = {"strict": True, "allow_inf_nan": False, "le": MAX_LIFETIME}  # (never converted first: no bool, no text)


class SiteKeyEntry(BaseModel):
    """One site key as a keys file gives it (``QUOTECLIP_SITE_KEYS`` entries are made into one): its fields and what
    each may hold. A secret's own rules (length, whitespace, UTF-8) are checked by ``_site_key``, which names it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(strict=True, pattern=_KEY_ID)]
    secret: object = None  # (its rules, with the key's name: _site_key)
    secrets: Annotated[dict[Annotated[str, Field(pattern=_KEY_ID)], object], Field(min_length=1)] | None = None
    brand: WatermarkSpec | None = None
    hosts: list[Annotated[str, Field(strict=True, min_length=1)]] | None = None
    max_seconds: Annotated[float, Field(gt=0, **_SECONDS)] | None = None
    lifetime: Annotated[float, Field(ge=1, **_SECONDS)] | None = None

    @field_validator("brand", mode="before")
    @classmethod
    def _brand_text(cls, value: object) -> object:
        return {"text": value} if isinstance(value, str) else value


def _entry_refused(entry: object, where: str, error: Any) -> BadInput:
    """What is wrong with a site key's entry, as the first of its errors says, named as the operator wrote it."""
    field_name = str(error["loc"][0]) if error["loc"] else ""
    fields_list = ", ".join(sorted(SiteKeyEntry.model_fields))
    top = error["type"] in ("extra_forbidden", "invalid_key") and len(error["loc"]) == 1
    if not field_name or top or field_name not in SiteKeyEntry.model_fields:
        unknown = (
            sorted(str(k)[:64] for k in entry if k not in SiteKeyEntry.model_fields)
            if isinstance(entry, Mapping)
            else []
        )
        refused = f", not {', '.join(unknown)}" if unknown else ""
        return BadInput(f"{where} must be an object with {fields_list}{refused}")
    if field_name == "id":
        given = entry.get("id") if isinstance(entry, Mapping) else None
        return BadInput(f"{where}: id must be 1-64 letters, digits, - or _, got {given!r:.80}")
    if field_name == "secrets" and len(error["loc"]) == 3:  # (a key id: its loc ends with [key])
        return BadInput(f"{where}: a key id must be 1-64 letters, digits, - or _, got {error['loc'][1]!r:.80}")
    if field_name == "secrets":
        return BadInput(f'{where}: secrets must be an object of key ids and secrets, {{"k2": "…"}}')
    if field_name == "brand":
        return BadInput(f"{where}: brand is not a watermark ({error['msg']})")
    if field_name == "hosts":
        return BadInput(f"{where}: hosts must be a list of host names")
    least = "above 0" if field_name == "max_seconds" else "from 1"
    value = error.get("input")
    return BadInput(
        f"{where}: {field_name} must be a number of seconds {least} to {MAX_LIFETIME} (ten years), got {value!r:.40}"
    )


def _site_key(entry: object, where: str, names_id: bool = False) -> SiteKey:
    """One site key from its entry; BadInput naming ``where`` (and the key's id, unless ``names_id``: ``where`` says
    it already) and what is wrong."""
    named_id = entry.get("id") if isinstance(entry, Mapping) else None
    if not names_id and isinstance(named_id, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", named_id):
        where = f"{where} ({named_id})"
    try:
        key = SiteKeyEntry.model_validate(entry)
    except ValidationError as exc:
        errors = exc.errors()
        first = next(
            (e for e in errors if e["type"] in ("extra_forbidden", "invalid_key") and len(e["loc"]) == 1), errors[0]
        )
        raise _entry_refused(entry, where, first) from None
    live: list[tuple[str | None, object]] = list((key.secrets or {}).items())
    if key.secret is not None or not live:
        live.append((None, key.secret))  # the key without an id: its links name the site alone
    for kid, text in live:
        named_as = "secret" if kid is None else f"the secret of key {kid}"
        if not isinstance(text, str) or len(text) < 16:
            raise BadInput(f"{where}: {named_as} must be text of at least 16 characters")
        if text != text.strip():  # a signer given the secret without it would make links answered 403
            raise BadInput(f"{where}: {named_as} must not begin or end with whitespace")
        if not text.isascii():
            try:
                text.encode("utf-8")  # bytes of the environment that are not UTF-8 arrive as lone surrogates
            except UnicodeEncodeError:
                raise BadInput(f"{where}: {named_as} must be UTF-8 text (it holds bytes that are not)") from None
    (first_id, first_secret), *others = [(kid, str(text)) for kid, text in live]
    return SiteKey(
        key.id,
        first_secret,
        key.brand,
        None if key.hosts is None else tuple(h.lower() for h in key.hosts),
        key.max_seconds,
        None if key.lifetime is None else int(key.lifetime),
        first_id,
        tuple(others),
    )


def _site_keys(text: str, name: str) -> tuple[SiteKey, ...]:
    """``SITE:SECRET`` or ``SITE:KEYID:SECRET``, comma-separated: keys without scopes; a site's entries, in the order
    listed, are its live keys (the first signs by default)."""
    sites: dict[str, list[tuple[str | None, str]]] = {}
    for item in _items(text, name):
        site, colon, rest = item.partition(":")
        if not colon or not rest:
            raise BadInput(f"{name} entry {site[:64]!r}: no secret: write SITE:SECRET or SITE:KEYID:SECRET")
        kid, colon, secret = rest.partition(":") if rest.count(":") else (None, "", rest)
        listed = sites.setdefault(site, [])
        if any(known == kid for known, _ in listed):
            raise BadInput(f"{name} names the key {site[:64]!r}" + (f" {kid[:64]!r}" if kid else "") + " twice")
        listed.append((kid, secret))
    keys = []
    for site, listed in sites.items():
        unnamed = [secret for kid, secret in listed if kid is None]
        named = {kid: secret for kid, secret in listed if kid is not None}
        entry: dict[str, object] = {"id": site, **({"secrets": named} if named else {})}
        if unnamed:
            entry["secret"] = unnamed[0]
        key = _site_key(entry, f"{name} entry {site[:64]!r}", names_id=True)
        keys.append(replace(key, key_id=listed[0][0], secret=listed[0][1], others=tuple(listed[1:])))
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
    ``field`` it fills through ``parse`` (the field it is declared on, set once the class is made; None: read where
    ``read_by`` says, through ``env_text``), its ``default`` as users see it (None: the field's own default, shown by
    the parser), its one line of ``meaning``, and its ``group`` on the configuration page."""

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


def _setting(
    name: str,
    meaning: str,
    *,
    default: Any = None,
    group: str,
    parse: Callable[[str, str], Any] = _text,
    shown: str | None = None,
    also: tuple[str, ...] = (),
    factory: Callable[[], Any] | None = None,
    secret: bool = False,
) -> Any:
    """A Settings field filled by the variable ``name``: the field's ``default`` (or its ``factory``, called when
    Settings are built) and the variable's declaration (``shown``: the default as the page says it, where the
    field's own value does not say it well; ``secret``: kept out of the Settings' repr)."""
    declared = Setting(name, meaning, group=group, parse=parse, default=shown, also=also)
    if factory is not None:
        return field(default_factory=factory, repr=not secret, metadata={"setting": declared})
    return field(default=default, repr=not secret, metadata={"setting": declared})


def _fixed(default: Any, meaning: str) -> Any:
    """A Settings field no variable fills: a limit the product sets for itself (tests build Settings with others)."""
    return field(default=default, metadata={"fixed": meaning})


_PRESETS = ", ".join(f"`{p}`" for p in get_args(EncoderPreset))
_QUEUE_HOSTS = ", ".join(DEFAULT_SOURCE_HOSTS)


@dataclass(frozen=True)
class Settings:
    """Every setting a command, a worker or the API runs with: built once by ``from_env`` in the entry point and
    passed down. Each field is declared with the variable that fills it (``_setting``), or as fixed (``_fixed``)."""

    storage_dir: Path = _setting(
        "QUOTECLIP_STORAGE_DIR",
        "the local clip folder (used when no S3 bucket is set)",
        default=Path("clips"),
        group="storage",
        parse=_path,
        shown="`clips` in the working directory",
    )
    s3_endpoint: str | None = _setting(
        "QUOTECLIP_S3_ENDPOINT", "an S3-compatible store's endpoint URL", group="storage", shown="none (AWS S3)"
    )
    s3_bucket: str | None = _setting(
        "QUOTECLIP_S3_BUCKET",
        "the bucket clips are stored in; setting it turns S3 storage on",
        group="storage",
        shown="none (the local clip folder)",
    )
    s3_region: str = _setting("QUOTECLIP_S3_REGION", "the bucket's region", default="us-east-1", group="storage")
    aws_access_key_id: str | None = _setting(
        "AWS_ACCESS_KEY_ID", "S3 credentials: the access key", group="storage", shown="boto3's usual chain", secret=True
    )
    aws_secret_access_key: str | None = _setting(
        "AWS_SECRET_ACCESS_KEY",
        "S3 credentials: the secret key",
        group="storage",
        shown="boto3's usual chain",
        secret=True,
    )
    link_ttl: int = _setting(
        "QUOTECLIP_LINK_TTL",
        "lifetime of a clip's links (presigned S3 links, signed download and file links), seconds",
        default=3600,
        group="storage",
        parse=_Number(1, whole=True),
    )
    public_base_url: str | None = _setting(
        "QUOTECLIP_PUBLIC_BASE_URL",
        "S3 storage: return public URLs under this base (a public bucket or a CDN) instead of presigned links",
        group="storage",
        parse=_base_url,
    )
    redis_url: str = _setting(
        "QUOTECLIP_REDIS_URL",
        "Redis for the queue, the job states, their events and the API's rate limits: a server "
        "(`redis://[:PASSWORD@]HOST:PORT/DB`, `rediss://`, `unix://`) or a primary found through Sentinel, "
        "`redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT…]/SERVICE_NAME[/DB]` (the sentinels, the name they "
        "monitor the primary by; `?sentinel_password=` when the sentinels have one of their own)",
        default="redis://127.0.0.1:6379/0",
        group="queue",
        parse=_redis_url,
        shown="the embedded server a running `quoteclip up` recorded under the clip folder, else the fallback "
        "`redis://127.0.0.1:6379/0`, which `up` never uses (it starts the embedded server) and `revoke` refuses (its "
        "entry must reach the service's Redis)",
        also=("REDIS_URL",),
    )
    queue_name: str = _fixed("quoteclip", "the queues' names (tests use their own)")
    loopback_hosts: bool = _fixed(False, "the queue's default hosts take loopback's too (QUOTECLIP_ALLOW_LOOPBACK)")
    # Hosts remote sources may come from ("*": any public host). None: any for the CLI, the defaults for the queue.
    source_hosts: tuple[str, ...] | None = _setting(
        "QUOTECLIP_SOURCE_HOSTS",
        "hosts remote sources may come from, comma-separated; `*` for any public host",
        group="sources and fetching",
        parse=_hosts,
        shown=f"command line: any; queue: {_QUEUE_HOSTS}",
    )
    # None: allowed for the CLI, refused for queued jobs (a website must not make a worker read its disk).
    allow_local_sources: bool | None = _setting(
        "QUOTECLIP_ALLOW_LOCAL_SOURCES",
        "allow local paths as sources (`true` or `false`)",
        group="sources and fetching",
        parse=_flag,
        shown="command line: yes; queue: no",
    )
    allow_addresses: tuple[str, ...] = _setting(
        "QUOTECLIP_ALLOW_ADDRESSES",
        "private or loopback networks sources may resolve to, comma-separated (e.g. `127.0.0.1`); never metadata "
        "addresses",
        default=(),
        group="sources and fetching",
        parse=parse_networks,
    )
    allow_loopback: bool = _setting(
        "QUOTECLIP_ALLOW_LOOPBACK",
        "`true`: sources on this machine's loopback (127.0.0.1, localhost, ::1) are allowed, their hosts and their "
        "addresses alike (what `QUOTECLIP_SOURCE_HOSTS` and `QUOTECLIP_ALLOW_ADDRESSES` would each need), for "
        "trying quoteclip against a local web server; `quoteclip up --dev` sets it, and `quoteclip sign --check` "
        "honours it. Never on a public service",
        default=False,
        group="sources and fetching",
        parse=_flag,
        shown="false",
    )
    cache_dir: Path = _setting(
        "QUOTECLIP_CACHE_DIR",
        "the source block cache's folder",
        group="sources and fetching",
        parse=_path,
        shown="`quoteclip/sources` in the user's cache folder (`~/.cache/quoteclip/sources`)",
        factory=lambda: default_cache_dir() / "sources",
    )
    cache_max_bytes: int = _setting(
        "QUOTECLIP_CACHE_MAX_MB",
        "the source block cache's size, MB",
        default=2 * 1024**3,
        group="sources and fetching",
        parse=_Number(1, unit=1024**2, whole=True),
    )
    max_fetch_bytes: int = _setting(
        "QUOTECLIP_MAX_FETCH_MB",
        "most a job fetches from its sources, MB",
        default=1024**3,
        group="sources and fetching",
        parse=_Number(1, unit=1024**2, whole=True),
    )
    fetch_timeout: float = _setting(
        "QUOTECLIP_FETCH_TIMEOUT",
        "a source read that stalls this many seconds fails",
        default=20.0,
        group="sources and fetching",
        parse=_Number(0.1),
    )
    fetch_header_timeout: float = _setting(
        "QUOTECLIP_FETCH_HEADER_TIMEOUT",
        "a source request (media, playlist, segment) whose response headers are not all in within this many seconds "
        "fails",
        default=20.0,
        group="sources and fetching",
        parse=_Number(0.1),
    )
    # bytes a second (the variable counts KB/s)
    min_fetch_rate: int = _setting(
        "QUOTECLIP_MIN_FETCH_RATE",
        "a source request averaging under this many KB/s, counted from the request (the wait for its headers "
        "included), fails once `QUOTECLIP_FETCH_RATE_GRACE` has passed",
        default=32 * 1024,
        group="sources and fetching",
        parse=_Number(1, unit=1024, whole=True),
    )
    fetch_rate_grace: float = _setting(
        "QUOTECLIP_FETCH_RATE_GRACE",
        "seconds a source request may run before `QUOTECLIP_MIN_FETCH_RATE` applies",
        default=30.0,
        group="sources and fetching",
        parse=_Number(0),
    )
    max_source_seconds: float = _setting(
        "QUOTECLIP_MAX_SOURCE_SECONDS",
        "longest source, seconds",
        default=6 * 3600,
        group="sources and fetching",
        parse=_Number(1),
    )
    max_frame_pixels: int = _fixed(8192 * 8192, "the largest frame the probe accepts (hostile input)")
    max_streams: int = _fixed(8, "the most streams a source may have (hostile input)")
    origin_concurrency: int = _setting(
        "QUOTECLIP_ORIGIN_CONCURRENCY",
        "requests in flight to one origin host from one job at most",
        default=4,
        group="sources and fetching",
        parse=_Number(1, whole=True),
    )
    origin_rate: float = _setting(
        "QUOTECLIP_ORIGIN_RATE",
        "requests a second to one origin host from one job at most (0: no limit)",
        default=0.0,
        group="sources and fetching",
        parse=_Number(0),
    )
    proxy: str | None = _setting(
        "QUOTECLIP_PROXY",
        "one http:// proxy (a host and a port; `user:password@` allowed) for everything sources fetch, pages and "
        "media; the address rules still apply to what quoteclip asks it for",
        group="sources and fetching",
        parse=_proxy,
        secret=True,
    )
    cookies_file: Path | None = _setting(
        "QUOTECLIP_COOKIES_FILE",
        "a Netscape cookies file for yt-dlp (signed-in pages, bot checks); each job reads a private copy, the file "
        "itself is never rewritten and never goes to Redis",
        group="extraction",
        parse=_path,
    )
    extractor_args: tuple[str, ...] = _setting(
        "QUOTECLIP_EXTRACTOR_ARGS",
        "yt-dlp `--extractor-args` values, space-separated (e.g. "
        "`youtube:player_client=default,mweb;po_token=web.gvs+TOKEN`)",
        default=(),
        group="extraction",
        parse=_words,
    )
    extraction_ttl: float = _setting(
        "QUOTECLIP_EXTRACTION_TTL",
        "longest a page's extraction (its media URLs) is reused by the jobs of that page, seconds; never past its "
        "URLs' `expire=`",
        default=3600.0,
        group="extraction",
        parse=_Number(0),
    )
    youtube_formats: str = _setting(
        "QUOTECLIP_YOUTUBE_FORMATS",
        "which formats a page (YouTube or another yt-dlp site) is read in: `auto` (plain http(s) files first, the "
        "page's HLS rendition when they are refused, missing or SABR-only) or `hls` (HLS whenever the page offers it)",
        default="auto",
        group="extraction",
        parse=_format_family,
    )
    plain_refused_ttl: float = _setting(
        "QUOTECLIP_PLAIN_REFUSED_TTL",
        "how long, once a site refused its plain formats (HTTP 403), the next clips of that site go to its HLS "
        "rendition at once, seconds (remembered in Redis by workers, in the cache folder by the CLI)",
        default=1800.0,
        group="extraction",
        parse=_Number(0),
    )
    source_caption_langs: tuple[str, ...] = _setting(
        "QUOTECLIP_SOURCE_CAPTION_LANGS",
        "the languages a source's own captions (`transcript: source`) are read in, comma-separated, first found "
        "wins; a human-made track before an automatic one",
        default=("en",),
        group="extraction",
        parse=_items,
        shown="`en`",
    )
    available_wait: float = _setting(
        "QUOTECLIP_AVAILABLE_WAIT",
        "longest a job waits for a format the site makes available later (`available_at`), seconds",
        default=60.0,
        group="extraction",
        parse=_Number(0),
    )
    max_clip_seconds: float = _setting(
        "QUOTECLIP_MAX_CLIP_SECONDS",
        "longest clip, seconds",
        default=DEFAULT_MAX_SECONDS,
        group="rendering",
        parse=_Number(0.1),
    )
    split_seconds: float = _setting(
        "QUOTECLIP_SPLIT_SECONDS",
        "a queued clip longer than this many seconds renders in pieces on several workers, joined into the one clip "
        "(`0`: every clip renders whole on one worker; docs/scaling.md)",
        default=60.0,
        group="rendering",
        parse=_Number(0),
    )
    piece_seconds: float = _setting(
        "QUOTECLIP_PIECE_SECONDS",
        "length of each piece of a clip rendered in pieces, seconds (the pieces are of equal length, to a frame)",
        default=15.0,
        group="rendering",
        parse=_Number(2),
    )
    encoder_preset: EncoderPreset | None = _setting(
        "QUOTECLIP_ENCODER_PRESET",
        f"x264 preset of final renders whose request names none: {_PRESETS}",
        group="rendering",
        parse=_preset,
        shown="`veryfast`",
    )
    brand_dir: Path | None = _setting(
        "QUOTECLIP_BRAND_DIR",
        "the operator's brand files (logos, fonts), named in specs as `brand:NAME`",
        group="rendering",
        parse=_path,
    )
    ffmpeg_binary: str | None = _setting(
        "FFMPEG_BINARY",
        "another ffmpeg (a path, or a command on the PATH); the version of each binary (for the manifest) is asked "
        "once and remembered in the cache folder's `ffmpeg-versions.json`",
        group="rendering",
        shown="the imageio-ffmpeg wheel's binary, found by its path without a check run",
    )
    # A render may take this many seconds per second of clip, plus a fixed allowance (render_timeout).
    render_timeout_factor: float = _fixed(20.0, "a render's time limit per second of clip")
    render_timeout_base: float = _fixed(60.0, "a render's fixed time allowance")
    api_keys: tuple[str, ...] = _setting(
        "QUOTECLIP_API_KEYS",
        "API keys, comma-separated; with keys set, every route needs one (`Authorization: Bearer KEY`)",
        default=(),
        group="API and security",
        parse=_items,
        shown="none (no key needed)",
        secret=True,
    )
    rate_limit_per_minute: int = _setting(
        "QUOTECLIP_RATE_LIMIT",
        "clips a minute a client may ask for, per API key (per client address without keys): a clip request counts "
        "its profiles, a batch its quotes × profiles, a preview or an upload 1",
        default=600,
        group="API and security",
        parse=_Number(1, whole=True),
    )
    auth_failures_per_minute: int = _setting(
        "QUOTECLIP_AUTH_FAILURE_LIMIT",
        "failed authentications (a wrong key or link token) a minute from one client address; past it, every keyed "
        "route answers that address 429 until the minute has passed",
        default=30,
        group="API and security",
        parse=_Number(1, whole=True),
    )
    cors_origins: tuple[str, ...] = _setting(
        "QUOTECLIP_CORS_ORIGINS",
        "browser origins allowed to call the API, comma-separated",
        default=(),
        group="API and security",
        parse=_items,
    )
    link_secret: str | None = _setting(
        "QUOTECLIP_LINK_SECRET",
        "signs the expiring `?token=` of the download and file links a browser opens",
        group="API and security",
        shown="derived from the API keys",
        secret=True,
    )
    key_secret: str | None = _setting(
        "QUOTECLIP_KEY_SECRET",
        "mixed into every clip key, so clip URLs (public buckets) cannot be computed from a guessed request",
        group="API and security",
        secret=True,
    )
    trusted_proxies: tuple[str, ...] = _setting(
        "QUOTECLIP_TRUSTED_PROXIES",
        "proxies whose `X-Forwarded-For` and `X-Forwarded-Proto` the API trusts: addresses or networks, "
        "comma-separated",
        default=(),
        group="API and security",
        parse=parse_networks,
    )
    # the API's front door (api/server.py) and its Redis connections (api/deps.py)
    header_timeout: float = _setting(
        "QUOTECLIP_HEADER_TIMEOUT",
        "seconds a connection to the API has to send a request's headers (from its connection, or from its first "
        "byte after an answer); past it the connection is closed",
        default=10.0,
        group="API and security",
        parse=_Number(0.1),
    )
    body_timeout: float = _setting(
        "QUOTECLIP_BODY_TIMEOUT",
        "seconds a request to the API has to send its body once its headers are in; past it the connection is closed",
        default=60.0,
        group="API and security",
        parse=_Number(0.1),
    )
    keep_alive: float = _setting(
        "QUOTECLIP_KEEP_ALIVE",
        "seconds the API keeps an idle connection open between requests",
        default=5.0,
        group="API and security",
        parse=_Number(0.1),
    )
    send_timeout: float = _setting(
        "QUOTECLIP_SEND_TIMEOUT",
        "seconds an answer may make no progress (its client taking none of its bytes: a stored clip, a page, a "
        "stream alike) before its connection is closed; a slow client that keeps reading is never cut",
        default=30.0,
        group="API and security",
        parse=_Number(0.1),
    )
    event_loop: str = _setting(
        "QUOTECLIP_EVENT_LOOP",
        "the API's event loop: `asyncio` (Python's own; a stream's chunks are written from the bytes its viewers "
        "share, docs/deploy.md) or `uvloop` (installed apart: `pip install uvloop`; the same deadlines and caps, a "
        "stream's chunks written through the server)",
        default="asyncio",
        group="API and security",
        parse=_event_loop,
    )
    crowd_gc: bool = _setting(
        "QUOTECLIP_CROWD_GC",
        "the API's cyclic garbage collector held back for crowds: the objects made as it started frozen (never walked "
        "again), and while 64 connections or more are open its full collections wait, one every 30 s (each walks "
        "every object the crowd's connections made, all of them waiting). It paid in a bare `quoteclip serve`; "
        "behind a proxy, with two processes, it did not: set it false there (docs/deploy.md gives what it was worth)",
        default=True,
        group="API and security",
        parse=_flag,
    )
    access_log: bool = _setting(
        "QUOTECLIP_ACCESS_LOG",
        "the API writes a line for each answer to its log (uvicorn's access log, every token and key in it "
        "redacted). Behind a proxy whose own log has each request (nginx's), set it false: a new clip's crowd had "
        "its first bytes sooner without it (docs/deploy.md gives what it was worth)",
        default=True,
        group="API and security",
        parse=_flag,
    )
    give_back_memory: bool = _setting(
        "QUOTECLIP_GIVE_BACK_MEMORY",
        "once a crowd of 64 connections or more has left, the memory it freed is handed back to the system "
        "(glibc's `malloc_trim`; with `PYTHONMALLOC=malloc`, which `quoteclip serve` sets unless `PYTHONMALLOC` is "
        "set); docs/deploy.md gives what it is worth",
        default=True,
        group="API and security",
        parse=_flag,
    )
    max_connections: int = _setting(
        "QUOTECLIP_MAX_CONNECTIONS",
        "connections one API process holds at once; one more takes the place of the one waiting longest for a "
        "request's headers, else is answered `503` and closed as it comes (raise the process's open-file limit, "
        "`ulimit -n`, above it)",
        default=1000,
        group="API and security",
        parse=_Number(1, whole=True),
    )
    finders: int = _setting(
        "QUOTECLIP_FINDERS",
        'threads of one API process that read pages\' captions and find quotes in them (`transcript: "source"`, '
        "a batch's transcript, the edit page's words), apart from its request threads; as many requests more may "
        "wait for one, and past that a request is answered `503` with `Retry-After`",
        default=4,
        group="API and security",
        parse=_Number(1, whole=True),
    )
    mcp_api: str = _setting(
        "QUOTECLIP_MCP_API",
        "the API `quoteclip mcp` (an assistant's tools on stdio) sends its calls to: the address of `quoteclip up` or "
        "`quoteclip serve`",
        default="http://127.0.0.1:8000",
        group="API and security",
        parse=_service_url,
    )
    mcp_key: str | None = _setting(
        "QUOTECLIP_MCP_KEY",
        "the API key `quoteclip mcp` sends with its calls (one of the API's `QUOTECLIP_API_KEYS`): its rate limit and "
        "its right to sign and revoke links are that key's",
        group="API and security",
        parse=_text,
        shown="none",
        secret=True,
    )
    client_connections: int = _setting(
        "QUOTECLIP_CLIENT_CONNECTIONS",
        "connections one API process holds from one client address (an IPv6 /64 is one client) at once; one more is "
        "answered `429` with `Retry-After` and closed as it comes. The proxies of `QUOTECLIP_TRUSTED_PROXIES` are "
        "not capped (they carry every viewer's connections: cap those at the proxy, `limit_conn`)",
        default=256,
        group="API and security",
        parse=_Number(1, whole=True),
    )
    redis_connections: int = _setting(
        "QUOTECLIP_API_REDIS_CONNECTIONS",
        "Redis connections one API process holds in all, whatever its viewers, clips and requests: one for job "
        "events, one reading every clip it streams, the rest shared by its threads and its event loop (one each at "
        "the least; through Sentinel, whose pools do not wait for a free connection, each may open this many)",
        default=4,
        group="API and security",
        parse=_Number(1, whole=True),
    )
    client_streams: int = _setting(
        "QUOTECLIP_CLIENT_STREAMS",
        "streams of clips being rendered one client address may read at once from one API process; past it, `429` "
        "with `Retry-After`",
        default=8,
        group="API and security",
        parse=_Number(1, whole=True),
    )
    client_held: int = _setting(
        "QUOTECLIP_CLIENT_HELD",
        "requests one client address may have held at once by one API process (waiting for a clip's stream or its "
        "stored file); past it, `429` with `Retry-After`",
        default=16,
        group="API and security",
        parse=_Number(1, whole=True),
    )
    client_parts: int = _setting(
        "QUOTECLIP_CLIENT_PARTS",
        "HLS part requests (playlist, init segment, fragments) a second one client address may make to one API "
        "process; past it, `429` with `Retry-After`",
        default=200,
        group="API and security",
        parse=_Number(1, whole=True),
    )
    # Websites' keys for signed links: listed ones here, scoped ones in site_key_scopes (Settings.sites has both).
    site_keys: tuple[SiteKey, ...] = _setting(
        "QUOTECLIP_SITE_KEYS",
        "websites' keys for signed clip links, `SITE:SECRET` or `SITE:KEYID:SECRET`, comma-separated (secrets of at "
        "least 16 characters; a site's entries are its live keys, the first listed signs by default); with none, "
        "the link routes do not exist; a key removed ends its links (purge a CDN's copies of them: see the websites "
        "page)",
        default=(),
        group="signed links",
        parse=_site_keys,
        shown="none",
        secret=True,
    )
    site_key_scopes: tuple[SiteKey, ...] = _setting(
        "QUOTECLIP_SITE_KEYS_FILE",
        'a JSON file of site keys with scopes: `{"keys": [{"id", "secret", "secrets", "brand", "hosts", '
        '"max_seconds", "lifetime"}]}`, `secrets` the key ids and secrets of a site with several (see the websites '
        "page)",
        default=(),
        group="signed links",
        parse=_site_keys_file,
        shown="none",
        secret=True,
    )
    link_base_url: str | None = _setting(
        "QUOTECLIP_LINK_BASE_URL",
        "the service's address as pages reach it, which `quoteclip sign` puts before a link's path",
        group="signed links",
        parse=_service_url,
        shown="none (links start with /l/)",
    )
    link_hold: float = _setting(
        "QUOTECLIP_LINK_HOLD",
        "seconds a signed link's request for a clip or poster not yet stored waits while it renders (under a "
        "CDN's origin timeout): for the clip's stream to begin, or for a download, a poster (or anything, with "
        "streaming off) to be stored; then it is answered `503` with `Retry-After`",
        default=25.0,
        group="signed links",
        parse=_Number(0.0),
    )
    download_hold: float = _setting(
        "QUOTECLIP_DOWNLOAD_HOLD",
        "seconds a signed link's download (`.download.mp4`, a browser's `<a href>`, which cannot stream nor act on "
        "`Retry-After`) waits for its clip to be stored, when that is longer than `QUOTECLIP_LINK_HOLD`: a long "
        "render still becomes a saved file (keep it under a CDN's origin timeout, and the proxy's read timeout "
        "above it)",
        default=90.0,
        group="signed links",
        parse=_Number(0.0),
    )
    link_renders_per_minute: int = _setting(
        "QUOTECLIP_LINK_RENDERS",
        "renders a minute each site key's links may start (a clip or a poster counts one; a stored one answered "
        "counts none); over it, `429` with `Retry-After`",
        default=60,
        group="signed links",
        parse=_Number(1, whole=True),
    )
    # the relay: jobs/relay.py
    stream: bool = _setting(
        "QUOTECLIP_STREAM",
        "stream a clip while it renders: a signed link's (and the page's) request for a clip not yet stored is "
        "answered with the clip's fragments as the worker encodes them, instead of being held until it is stored "
        "(`true` or `false`; read by the workers, which relay the fragments, and by the API, which answers with them)",
        default=True,
        group="streaming",
        parse=_flag,
    )
    stream_head: bool = _setting(
        "QUOTECLIP_STREAM_HEAD",
        "send Chromium-based players the stream's head (a first fragment listed in the moov) so they present the "
        "first frame from one fragment; off sends every player the init segment and fragments as they are (`true` "
        "or `false`)",
        default=True,
        group="streaming",
        parse=_flag,
    )
    stream_redis_url: str | None = _setting(
        "QUOTECLIP_STREAM_REDIS_URL",
        "the Redis the workers relay a rendering clip's fragments through to the API: one without persistence, "
        "with a `maxmemory`, apart from the queue's (see the streaming page); either form `QUOTECLIP_REDIS_URL` takes",
        group="streaming",
        parse=_redis_url,
        shown="the queue's (`QUOTECLIP_REDIS_URL`)",
    )
    stream_max_bytes: int = _setting(
        "QUOTECLIP_STREAM_MAX_MB",
        "most of one clip's fragments the relay holds at once, MB; past it the oldest are dropped: viewers already "
        "streaming go on, later ones wait for the stored clip",
        default=96 * 1024**2,
        group="streaming",
        parse=_Number(1, unit=1024**2, whole=True),
    )
    stream_send_timeout: float = _setting(
        "QUOTECLIP_STREAM_SEND_TIMEOUT",
        "seconds one piece of a stream may take to reach its viewer, beyond the clip's time it was sent ahead of its "
        "playback (a player that has buffered ahead stops reading until it has played it); a viewer slower than that "
        "(or not reading) is cut, its connection closed, and the other viewers never wait for it",
        default=10.0,
        group="streaming",
        parse=_Number(0.1),
    )
    stream_viewer_bytes: int = _setting(
        "QUOTECLIP_STREAM_VIEWER_MB",
        "most of a stream one viewer may fall behind by since it joined, MB; past it the viewer is cut (as much as "
        "the relay holds of a clip by default: a player reading a long clip at its playback's pace falls tens of MB "
        "behind a render that runs faster than the clip plays)",
        default=96 * 1024**2,
        group="streaming",
        parse=_Number(1, unit=1024**2, whole=True),
    )
    webhook_secret: str | None = _setting(
        "QUOTECLIP_WEBHOOK_SECRET",
        "signs webhooks (Standard Webhooks; `whsec_…` or any text)",
        group="webhooks",
        shown="unsigned",
        secret=True,
    )
    webhook_timeout: float = _setting(
        "QUOTECLIP_WEBHOOK_TIMEOUT",
        "seconds a webhook delivery may take in all: connecting, sending, and the receiver's status line and headers",
        default=10.0,
        group="webhooks",
        parse=_Number(0.1),
    )
    webhook_concurrency: int = _setting(
        "QUOTECLIP_WEBHOOK_CONCURRENCY",
        "deliveries one webhook worker (`quoteclip worker --webhooks`) makes at once",
        default=16,
        group="webhooks",
        parse=_Number(1, whole=True),
    )
    shutdown_grace: float = _setting(
        "QUOTECLIP_SHUTDOWN_GRACE",
        "seconds a worker lets its current render finish after SIGTERM",
        default=120.0,
        group="workers",
        parse=_Number(0),
    )
    maintenance_interval: int = _setting(
        "QUOTECLIP_MAINTENANCE_INTERVAL",
        "seconds between a worker's sweeps for abandoned jobs",
        default=60,
        group="workers",
        parse=_Number(1, whole=True),
    )
    worker_lease: float = _setting(
        "QUOTECLIP_WORKER_LEASE",
        "seconds a worker's lease in Redis lasts unrenewed (it renews it every third of that): a job whose worker's "
        "lease lapsed goes back to the queue, taken by another worker",
        default=15.0,
        group="workers",
        parse=_Number(3),
    )
    max_deaths: int = _setting(
        "QUOTECLIP_MAX_DEATHS",
        "a clip's job fails when this many of its workers died running it (killed, out of memory: an input that "
        "kills every worker it meets); until then it goes back to the queue, and these never spend an attempt",
        default=3,
        group="workers",
        parse=_Number(1, whole=True),
    )
    max_handbacks: int = _setting(
        "QUOTECLIP_MAX_HANDBACKS",
        "a clip's job fails when this many workers' machines failed it (full disk, no memory, no working ffmpeg); "
        "until then it goes back to the queue for another worker, and these never spend an attempt",
        default=3,
        group="workers",
        parse=_Number(1, whole=True),
    )
    min_free_bytes: int = _setting(
        "QUOTECLIP_MIN_FREE_MB",
        "free space a worker needs on its temp folder and on its source cache folder to take a job (a job needs "
        "room for its clips too)",
        default=512 * 1024**2,
        group="workers",
        parse=_Number(0, unit=1024**2, whole=True),
    )
    min_free_memory: int = _setting(
        "QUOTECLIP_MIN_FREE_MEMORY_MB",
        "memory a worker needs available (the machine's, or its container's) to take a job",
        default=256 * 1024**2,
        group="workers",
        parse=_Number(0, unit=1024**2, whole=True),
    )
    sick_pause: float = _setting(
        "QUOTECLIP_SICK_PAUSE",
        "seconds a worker takes no job after its machine failed one; then it takes jobs again once its disk, "
        "memory and ffmpeg pass their checks",
        default=30.0,
        group="workers",
        parse=_Number(0),
    )

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
        made = cls(**values)
        return made.with_loopback() if made.allow_loopback else made

    def with_loopback(self) -> Settings:
        """Loopback sources allowed (``QUOTECLIP_ALLOW_LOOPBACK``): their addresses, and their hosts where hosts are
        listed (the queue's default list included)."""
        hosts = self.source_hosts
        if hosts is None:  # (the command line takes any host; the queue its default list, given loopback here)
            return replace(self, allow_addresses=_joined(self.allow_addresses, LOOPBACK_NETWORKS), loopback_hosts=True)
        return replace(
            self,
            allow_addresses=_joined(self.allow_addresses, LOOPBACK_NETWORKS),
            source_hosts=_joined(hosts, LOOPBACK_HOSTS),
        )

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
        default = _joined(DEFAULT_SOURCE_HOSTS, LOOPBACK_HOSTS) if self.loopback_hosts else DEFAULT_SOURCE_HOSTS
        return replace(
            self,
            allow_local_sources=self.allow_local_sources is True,
            source_hosts=self.source_hosts if self.source_hosts is not None else default,
        )

    def render_timeout(self, clip_seconds: float) -> float:
        return self.render_timeout_base + self.render_timeout_factor * clip_seconds


# Variables read by another part of the product (``read_by``), through ``env_text``; they fill no Settings field.
ELSEWHERE: tuple[Setting, ...] = (
    Setting(
        "XDG_CACHE_HOME",
        "the user's cache folder; quoteclip's is `quoteclip` in it (the block cache, ffmpeg's version, the demo's "
        "video)",
        group="sources and fetching",
        default="`~/.cache`",
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
    Setting(
        "IMAGEIO_FFMPEG_EXE",
        "imageio-ffmpeg's own choice of ffmpeg: when set (and `FFMPEG_BINARY` is not), imageio-ffmpeg's lookup decides",
        group="rendering",
        read_by="renderer.ffmpeg",
        default="the wheel's binary",
    ),
    Setting(
        "QUOTECLIP_LOG_FORMAT",
        "the worker's and the API's log lines: `text`, or `json` (one object a line)",
        group="logging",
        read_by="quoteclip.logs",
        default="`text`",
    ),
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
    Setting(
        "PYTHONMALLOC",
        "`quoteclip serve` starts itself again with `malloc` when unset (the C library's allocator: the memory a "
        "crowd of viewers freed is handed back once they leave, see the scaling page); any value set is kept",
        group="command line",
        read_by="cli.service",
        default="`malloc` for `serve`",
    ),
)


def _filled() -> tuple[Setting, ...]:
    """The declarations on Settings' fields, in the fields' order, each told the field it fills."""
    found = []
    for each in fields(Settings):
        if (setting := each.metadata.get("setting")) is not None:
            setting.field = each.name
            found.append(setting)
    return tuple(found)


# Every declared variable: the Settings fields' ones, then the ones read elsewhere.
DECLARED: tuple[Setting, ...] = (*_filled(), *ELSEWHERE)
_BY_NAME = {setting.name: setting for setting in DECLARED}


def env_text(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The text of the declared variable ``name`` (or of a fallback it declares), None when unset or empty; an
    undeclared name is a KeyError."""
    return _BY_NAME[name].text(os.environ if env is None else env)


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    return Path(env_text("XDG_CACHE_HOME", env) or Path.home() / ".cache") / "quoteclip"


def configured_redis_url(env: Mapping[str, str]) -> str | None:
    return env_text("QUOTECLIP_REDIS_URL", env)


def shown_default(setting: Setting) -> str:
    """The default as the configuration page shows it: the declaration's words, else the field's own default."""
    if setting.default is not None:
        return setting.default
    if setting.field is None:
        raise ValueError(f"{setting.name} fills no field, so its declaration must say its default")
    value = Settings.__dataclass_fields__[setting.field].default
    if value is MISSING:
        raise ValueError(f"{setting.name}: its field's default is made when Settings are built, so say it (shown=)")
    show = getattr(setting.parse, "show", None)
    if show is not None:
        return str(show(value))
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
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
