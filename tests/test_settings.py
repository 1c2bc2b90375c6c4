"""The settings table is the one list of environment variables: every variable the product reads or names is declared
there and on the generated configuration page, the page is what ``python -m quoteclip.settings`` prints, and every
declared variable is read by ``Settings.from_env`` (or by the part its declaration names) and refused, naming it,
when bad. No services: the product's sources are read with ``ast``."""

from __future__ import annotations

import ast
import logging
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from quoteclip.errors import BadInput
from quoteclip.settings import (
    DECLARED,
    ELSEWHERE,
    GROUPS,
    Settings,
    SiteKey,
    default_cache_dir,
    env_text,
    shown_default,
)
from quoteclip.spec import WatermarkSpec
from testkit import product_packages

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = product_packages()
PAGE = ROOT / "docs" / "configuration.md"

# Variables the product reads that are not quoteclip's settings, each with its reason (none today: the ones it reads
# are declared). A name read by the product and neither declared nor listed here fails the first test.
NOT_SETTINGS: dict[str, str] = {}

# Settings fields no environment variable fills (declared with ``_fixed``): limits the product sets for itself (tests
# construct Settings with other values).
FIXED_FIELDS = {
    "max_frame_pixels",
    "max_streams",
    "render_timeout_factor",
    "render_timeout_base",
    "queue_name",
    "loopback_hosts",
}

# A valid text for every declared variable that fills a field, and the value it must give that field (never the
# default, so a variable from_env does not read fails).
SAMPLES: dict[str, tuple[str, object]] = {
    "QUOTECLIP_STORAGE_DIR": ("/data/clips", Path("/data/clips")),
    "QUOTECLIP_ALLOW_LOOPBACK": ("true", True),
    "QUOTECLIP_S3_ENDPOINT": ("http://s3.internal:8333", "http://s3.internal:8333"),
    "QUOTECLIP_S3_BUCKET": ("clips", "clips"),
    "QUOTECLIP_S3_REGION": ("eu-west-3", "eu-west-3"),
    "AWS_ACCESS_KEY_ID": ("AKIDEXAMPLE", "AKIDEXAMPLE"),
    "AWS_SECRET_ACCESS_KEY": ("wJalrXUtnFEMI", "wJalrXUtnFEMI"),
    "QUOTECLIP_LINK_TTL": ("60.7", 60),
    "QUOTECLIP_PUBLIC_BASE_URL": ("https://cdn.example/clips/", "https://cdn.example/clips"),
    "QUOTECLIP_REDIS_URL": ("redis://r:1/2", "redis://r:1/2"),
    "QUOTECLIP_SOURCE_HOSTS": ("cdn.example, Example.com", ("cdn.example", "example.com")),
    "QUOTECLIP_ALLOW_LOCAL_SOURCES": ("no", False),
    "QUOTECLIP_ALLOW_ADDRESSES": ("127.0.0.1, 10.0.0.0/8", ("127.0.0.1/32", "10.0.0.0/8")),
    "QUOTECLIP_CACHE_DIR": ("/var/cache/qc", Path("/var/cache/qc")),
    "QUOTECLIP_CACHE_MAX_MB": ("3", 3 * 1024**2),
    "QUOTECLIP_MAX_FETCH_MB": ("1.5", int(1.5 * 1024**2)),
    "QUOTECLIP_FETCH_TIMEOUT": ("2.5", 2.5),
    "QUOTECLIP_FETCH_HEADER_TIMEOUT": ("1.5", 1.5),
    "QUOTECLIP_MIN_FETCH_RATE": ("8", 8 * 1024),
    "QUOTECLIP_FETCH_RATE_GRACE": ("5", 5.0),
    "QUOTECLIP_MAX_SOURCE_SECONDS": ("600", 600.0),
    "QUOTECLIP_ORIGIN_CONCURRENCY": ("2", 2),
    "QUOTECLIP_ORIGIN_RATE": ("2.5", 2.5),
    "QUOTECLIP_PROXY": ("http://user:pw@proxy.internal:3128", "http://user:pw@proxy.internal:3128"),
    "QUOTECLIP_COOKIES_FILE": ("/etc/qc/cookies.txt", Path("/etc/qc/cookies.txt")),
    "QUOTECLIP_EXTRACTOR_ARGS": (
        "youtube:player_client=mweb  generic:impersonate",
        ("youtube:player_client=mweb", "generic:impersonate"),
    ),
    "QUOTECLIP_EXTRACTION_TTL": ("0", 0.0),
    "QUOTECLIP_YOUTUBE_FORMATS": ("HLS", "hls"),
    "QUOTECLIP_PLAIN_REFUSED_TTL": ("60", 60.0),
    "QUOTECLIP_SOURCE_CAPTION_LANGS": ("de, en", ("de", "en")),
    "QUOTECLIP_AVAILABLE_WAIT": ("5", 5.0),
    "QUOTECLIP_MAX_CLIP_SECONDS": ("30", 30.0),
    "QUOTECLIP_ENCODER_PRESET": ("ultrafast", "ultrafast"),
    "QUOTECLIP_SPLIT_SECONDS": ("90", 90.0),
    "QUOTECLIP_PIECE_SECONDS": ("20", 20.0),
    "QUOTECLIP_BRAND_DIR": ("/brand", Path("/brand")),
    "FFMPEG_BINARY": ("/opt/ffmpeg/bin/ffmpeg", "/opt/ffmpeg/bin/ffmpeg"),
    "QUOTECLIP_API_KEYS": ("k1, k2", ("k1", "k2")),
    "QUOTECLIP_SITE_KEYS": (
        "site-a:0123456789abcdef, b:fedcba9876543210",
        (SiteKey("site-a", "0123456789abcdef"), SiteKey("b", "fedcba9876543210")),
    ),
    "QUOTECLIP_SITE_KEYS_FILE": (
        str(ROOT / "deploy" / "site-keys.example.json"),
        (
            SiteKey(
                "starzero",
                "replace-with-32-random-characters",
                WatermarkSpec(text="StarZero"),
                ("youtube.com", "youtu.be"),
                60.0,
            ),
            SiteKey(
                "partner-preview",
                "replace-with-another-long-secret",
                WatermarkSpec(text="Partner", position="bottom-right", opacity=0.6),
                lifetime=86400,
            ),
        ),
    ),
    "QUOTECLIP_LINK_BASE_URL": ("https://clips.example/", "https://clips.example"),
    "QUOTECLIP_LINK_HOLD": ("2.5", 2.5),
    "QUOTECLIP_LINK_RENDERS": ("12", 12),
    "QUOTECLIP_STREAM": ("off", False),
    "QUOTECLIP_STREAM_REDIS_URL": ("redis://relay:6379/1", "redis://relay:6379/1"),
    "QUOTECLIP_STREAM_MAX_MB": ("8", 8 * 1024**2),
    "QUOTECLIP_STREAM_SEND_TIMEOUT": ("2.5", 2.5),
    "QUOTECLIP_STREAM_VIEWER_MB": ("4", 4 * 1024**2),
    "QUOTECLIP_HEADER_TIMEOUT": ("3", 3.0),
    "QUOTECLIP_BODY_TIMEOUT": ("20", 20.0),
    "QUOTECLIP_KEEP_ALIVE": ("2", 2.0),
    "QUOTECLIP_EVENT_LOOP": ("uvloop", "uvloop"),
    "QUOTECLIP_CROWD_GC": ("false", False),
    "QUOTECLIP_ACCESS_LOG": ("false", False),
    "QUOTECLIP_GIVE_BACK_MEMORY": ("false", False),
    "QUOTECLIP_MAX_CONNECTIONS": ("500", 500),
    "QUOTECLIP_FINDERS": ("2", 2),
    "QUOTECLIP_SEND_TIMEOUT": ("5", 5.0),
    "QUOTECLIP_CLIENT_CONNECTIONS": ("10", 10),
    "QUOTECLIP_DOWNLOAD_HOLD": ("120", 120.0),
    "QUOTECLIP_MCP_API": ("http://clips.example:9000/", "http://clips.example:9000"),
    "QUOTECLIP_MCP_KEY": ("k-123", "k-123"),
    "QUOTECLIP_API_REDIS_CONNECTIONS": ("2", 2),
    "QUOTECLIP_CLIENT_STREAMS": ("3", 3),
    "QUOTECLIP_CLIENT_HELD": ("5", 5),
    "QUOTECLIP_CLIENT_PARTS": ("50", 50),
    "QUOTECLIP_STREAM_HEAD": ("off", False),
    "QUOTECLIP_RATE_LIMIT": ("10", 10),
    "QUOTECLIP_AUTH_FAILURE_LIMIT": ("5", 5),
    "QUOTECLIP_CORS_ORIGINS": ("https://a.example,https://b.example", ("https://a.example", "https://b.example")),
    "QUOTECLIP_LINK_SECRET": ("s3cret", "s3cret"),
    "QUOTECLIP_KEY_SECRET": ("k3y", "k3y"),
    "QUOTECLIP_TRUSTED_PROXIES": ("10.1.2.3", ("10.1.2.3/32",)),
    "QUOTECLIP_WEBHOOK_SECRET": ("whsec_c2VjcmV0", "whsec_c2VjcmV0"),
    "QUOTECLIP_WEBHOOK_TIMEOUT": ("2.5", 2.5),
    "QUOTECLIP_WEBHOOK_CONCURRENCY": ("4", 4),
    "QUOTECLIP_SHUTDOWN_GRACE": ("5", 5.0),
    "QUOTECLIP_MAINTENANCE_INTERVAL": ("15", 15),
    "QUOTECLIP_WORKER_LEASE": ("6", 6.0),
    "QUOTECLIP_MAX_DEATHS": ("5", 5),
    "QUOTECLIP_MAX_HANDBACKS": ("7", 7),
    "QUOTECLIP_MIN_FREE_MB": ("0.5", 512 * 1024),
    "QUOTECLIP_MIN_FREE_MEMORY_MB": ("64", 64 * 1024**2),
    "QUOTECLIP_SICK_PAUSE": ("2.5", 2.5),
}

# Declared variables that take any text (paths, names, lists): nothing to refuse.
FREE_TEXT = {
    "QUOTECLIP_MCP_KEY",
    "QUOTECLIP_SOURCE_CAPTION_LANGS",
    "QUOTECLIP_STORAGE_DIR",
    "QUOTECLIP_S3_ENDPOINT",
    "QUOTECLIP_S3_BUCKET",
    "QUOTECLIP_S3_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "QUOTECLIP_PUBLIC_BASE_URL",
    "QUOTECLIP_SOURCE_HOSTS",
    "QUOTECLIP_CACHE_DIR",
    "QUOTECLIP_COOKIES_FILE",
    "QUOTECLIP_EXTRACTOR_ARGS",
    "QUOTECLIP_BRAND_DIR",
    "FFMPEG_BINARY",
    "QUOTECLIP_API_KEYS",
    "QUOTECLIP_CORS_ORIGINS",
    "QUOTECLIP_LINK_SECRET",
    "QUOTECLIP_KEY_SECRET",
    "QUOTECLIP_WEBHOOK_SECRET",
}

MENTION = re.compile(r"\bQUOTECLIP_[A-Z0-9_]*[A-Z0-9]\b")
ENV_METHODS = {"get", "setdefault", "pop", "__getitem__", "__contains__"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_environ(node: ast.expr) -> bool:
    """``os.environ``, ``environ``, or a mapping parameter named ``env`` standing for it."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ"
    return isinstance(node, ast.Name) and node.id in {"environ", "env"}


def _constant(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def scan(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(variables read, variables named in any string or keyword) in one module's syntax tree."""
    reads: set[str] = set()
    named: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            first = _constant(node.args[0]) if node.args else None
            if isinstance(func, ast.Attribute) and func.attr in ENV_METHODS and _is_environ(func.value) and first:
                reads.add(first)  # os.environ.get("X"), env.get("X"), os.environ.setdefault("X", …)
            elif isinstance(func, ast.Attribute | ast.Name) and first:
                called = func.attr if isinstance(func, ast.Attribute) else func.id
                if called in {"getenv", "env_text"}:
                    reads.add(first)  # os.getenv("X"), env_text("X")
            named.update(k.arg for k in node.keywords if k.arg and MENTION.fullmatch(k.arg))  # env.update(X=…)
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and (key := _constant(node.slice)):
            reads.add(key)  # os.environ["X"], env["X"]
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            if key := _constant(node.left):
                reads.add(key)  # "X" in os.environ
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named.update(MENTION.findall(node.value))  # names in code, messages and docstrings
    return reads, named


def product_reads() -> dict[str, dict[str, set[str]]]:
    """Per product module: the variables it reads ("reads") and the QUOTECLIP_ names it mentions ("named")."""
    paths = [ROOT / "worker.py"] + sorted(p for package in PRODUCT for p in (ROOT / package).rglob("*.py"))
    found = {}
    for path in paths:
        reads, named = scan(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        found[_module(path)] = {"reads": reads, "named": named}
    return found


def declared_names() -> set[str]:
    return {name for setting in DECLARED for name in (setting.name, *setting.also)}


def test_every_variable_the_product_reads_is_declared_and_on_the_page() -> None:
    found = product_reads()
    used = {name: module for module, seen in found.items() for name in seen["reads"] | seen["named"]}
    assert {"QUOTECLIP_DEBUG", "QUOTECLIP_LOG_FORMAT", "IMAGEIO_FFMPEG_EXE", "XDG_CACHE_HOME"} <= set(used), (
        "the scan no longer finds the reads it was written for"
    )
    undeclared = {name: module for name, module in used.items() if name not in declared_names() | set(NOT_SETTINGS)}
    assert not undeclared, f"read or named by the product but not declared in quoteclip/settings.py: {undeclared}"
    assert set(NOT_SETTINGS) <= set(used), "NOT_SETTINGS lists a variable the product no longer reads"
    page = PAGE.read_text(encoding="utf-8")
    missing = sorted(name for name in declared_names() if f"`{name}`" not in page)
    assert not missing, f"declared but not on docs/configuration.md: {missing}"


def test_a_declaration_says_who_reads_it() -> None:
    """A variable that fills a Settings field is read by Settings.from_env alone (then passed down); any other is
    read by the part its declaration names, and by no other part."""
    readers: dict[str, set[str]] = {}
    for module, seen in product_reads().items():
        for name in seen["reads"]:
            readers.setdefault(name, set()).add(module)
    for setting in DECLARED:
        where = readers.get(setting.name, set())
        if setting.field is not None:
            assert where <= {"quoteclip.settings"}, (
                f"{setting.name} fills Settings.{setting.field}, yet {where} read it"
            )
        else:
            assert where, f"{setting.name}: declared as read by {setting.read_by}, but nothing reads it"
            strays = {m for m in where if m != setting.read_by and not m.startswith(setting.read_by + ".")}
            assert not strays, f"{setting.name}: declared as read by {setting.read_by}, also read by {strays}"
        assert setting.group in GROUPS, setting.name


def test_undeclared_names_are_refused() -> None:
    with pytest.raises(KeyError):
        env_text("QUOTECLIP_NOT_A_SETTING", {"QUOTECLIP_NOT_A_SETTING": "1"})
    assert env_text("QUOTECLIP_REDIS_URL", {"REDIS_URL": "redis://b", "QUOTECLIP_REDIS_URL": ""}) == "redis://b"


def test_each_setting_is_declared_on_the_field_it_fills() -> None:
    """A Settings field carries its variable's declaration (or says it is fixed); DECLARED is those declarations, in
    the fields' order, then the ones read elsewhere; the page's default of each is the field's own."""
    on_fields = []
    for each in fields(Settings):
        setting, fixed = each.metadata.get("setting"), each.metadata.get("fixed")
        assert (setting is None) != (fixed is None), f"Settings.{each.name}: declare it with _setting or _fixed"
        if fixed is not None:
            assert each.name in FIXED_FIELDS and fixed.strip(), each.name
            continue
        assert setting.field == each.name and setting.group in GROUPS and setting.meaning.strip(), each.name
        on_fields.append(setting)
    assert DECLARED == (*on_fields, *ELSEWHERE)
    names = [name for setting in DECLARED for name in (setting.name, *setting.also)]
    assert len(names) == len(set(names)), "a variable declared twice"
    assert all(setting.field is None and setting.default is not None for setting in ELSEWHERE)
    built = Settings()
    page = PAGE.read_text(encoding="utf-8")
    for setting in on_fields:
        assert f"`{setting.name}`" in page and f" | {shown_default(setting)} |" in page, setting.name
        if setting.default is None:  # shown from the field's own default: the default Settings are built with
            assert getattr(built, setting.field) == Settings.__dataclass_fields__[setting.field].default
    assert shown_default(next(s for s in DECLARED if s.name == "QUOTECLIP_STREAM")) == "`true`"
    assert shown_default(next(s for s in DECLARED if s.name == "QUOTECLIP_LINK_TTL")) == "3600"
    assert shown_default(next(s for s in DECLARED if s.name == "QUOTECLIP_CACHE_MAX_MB")) == "2048"


def test_the_stream_head_is_a_streaming_setting() -> None:
    """QUOTECLIP_STREAM_HEAD fills Settings.stream_head (on unless turned off), on the page among the streaming
    settings; a field no other part reads yet is accepted."""
    head = next(setting for setting in DECLARED if setting.name == "QUOTECLIP_STREAM_HEAD")
    assert (head.field, head.group, shown_default(head)) == ("stream_head", "streaming", "`true`")
    assert Settings().stream_head is True and Settings.from_env({}).stream_head is True
    assert Settings.from_env({"QUOTECLIP_STREAM_HEAD": "false"}).stream_head is False
    assert Settings.from_env({"QUOTECLIP_STREAM_HEAD": "on"}).stream_head is True
    with pytest.raises(BadInput, match="QUOTECLIP_STREAM_HEAD must be true or false, got 'sometimes'"):
        Settings.from_env({"QUOTECLIP_STREAM_HEAD": "sometimes"})
    streaming = PAGE.read_text(encoding="utf-8").split("## Streaming\n", 1)[1].split("\n## ", 1)[0]
    assert "| `QUOTECLIP_STREAM_HEAD` | send Chromium-based players the stream's head" in streaming


def test_importing_the_settings_reads_no_environment() -> None:
    """Importing the module reads no variable (a bad value is refused when Settings are built, not at import) and
    loads no settings library."""
    bad = {setting.name: "soon" for setting in DECLARED if setting.field is not None and setting.name not in FREE_TEXT}
    code = (
        "import sys, quoteclip.settings as s; "
        "assert 'pydantic_settings' not in sys.modules, 'pydantic_settings imported'; "
        "print(len(s.DECLARED))"
    )
    env = {"PATH": "/usr/bin:/bin", **bad}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(DECLARED)


def test_the_page_is_what_the_command_prints() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "quoteclip.settings"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert printed.startswith("# Configuration\n") and "python -m quoteclip.settings" in printed
    assert "A bad value is refused with exit code 2 naming the variable" in printed
    assert PAGE.read_text(encoding="utf-8") == printed, (
        "docs/configuration.md is stale: python -m quoteclip.settings > docs/configuration.md"
    )


def test_every_declared_variable_is_read_by_from_env() -> None:
    filling = {setting.name: setting.field for setting in DECLARED if setting.field is not None}
    assert set(SAMPLES) == set(filling), "a declared variable with no sample here (or a sample for none)"
    declared_fields = set(filling.values())
    assert len(declared_fields) == len(filling), "two variables fill one field"
    assert declared_fields | set(FIXED_FIELDS) == {f.name for f in fields(Settings)}, (
        "a Settings field neither declared nor fixed"
    )
    assert not declared_fields & set(FIXED_FIELDS)
    default = Settings.from_env({})
    for name, (text, expected) in SAMPLES.items():
        field = filling[name]
        assert expected != getattr(default, field), f"{name}'s sample is its default"
        assert getattr(Settings.from_env({name: text}), field) == expected, name
        assert getattr(Settings.from_env({name: ""}), field) == getattr(default, field), f"{name}: empty is unset"
    # (every sample at once, loopback's aside: it adds to the hosts and networks listed, test_up.py checks how)
    alone = {name: sample for name, sample in SAMPLES.items() if name != "QUOTECLIP_ALLOW_LOOPBACK"}
    everything = Settings.from_env({name: text for name, (text, _) in alone.items()})
    assert all(getattr(everything, filling[name]) == expected for name, (_, expected) in alone.items())
    # the fallback, and the variables read outside Settings
    assert Settings.from_env({"REDIS_URL": "redis://b:2/3"}).redis_url == "redis://b:2/3"
    assert Settings.from_env({"REDIS_URL": "redis://b", "QUOTECLIP_REDIS_URL": "redis://a"}).redis_url == "redis://a"
    assert default_cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/quoteclip")
    assert Settings.from_env({"XDG_CACHE_HOME": "/x"}).cache_dir == Path("/x/quoteclip/sources")


def test_the_log_format_is_read_through_its_declaration(monkeypatch) -> None:
    from quoteclip.logs import JsonFormatter, setup_service_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        monkeypatch.setenv("QUOTECLIP_LOG_FORMAT", "JSON")
        setup_service_logging()
        assert isinstance(root.handlers[0].formatter, JsonFormatter)
        monkeypatch.setenv("QUOTECLIP_LOG_FORMAT", "")
        setup_service_logging()
        assert not isinstance(root.handlers[0].formatter, JsonFormatter)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def test_bad_values_are_refused_naming_the_variable() -> None:
    for setting in DECLARED:
        if setting.field is None:
            continue
        if setting.name in FREE_TEXT:
            Settings.from_env({setting.name: "soon"})  # any text is a value
            continue
        with pytest.raises(BadInput) as refused:
            Settings.from_env({setting.name: "soon"})
        assert type(refused.value) is BadInput and str(refused.value).startswith(f"{setting.name} "), setting.name
    assert FREE_TEXT <= {setting.name for setting in DECLARED if setting.field is not None}
    for env, message in (
        ({"QUOTECLIP_LINK_TTL": "soon"}, "QUOTECLIP_LINK_TTL must be a number, got 'soon'"),
        ({"QUOTECLIP_LINK_TTL": "0"}, "QUOTECLIP_LINK_TTL must be at least 1, got '0'"),
        ({"QUOTECLIP_CACHE_MAX_MB": "nan"}, "QUOTECLIP_CACHE_MAX_MB must be at least 1, got 'nan'"),
        ({"QUOTECLIP_FETCH_TIMEOUT": "0.05"}, "QUOTECLIP_FETCH_TIMEOUT must be at least 0.1, got '0.05'"),
        ({"QUOTECLIP_ORIGIN_RATE": "-1"}, "QUOTECLIP_ORIGIN_RATE must be at least 0, got '-1'"),
        (
            {"QUOTECLIP_ALLOW_LOCAL_SOURCES": "maybe"},
            "QUOTECLIP_ALLOW_LOCAL_SOURCES must be true or false, got 'maybe'",
        ),
        (
            {"QUOTECLIP_TRUSTED_PROXIES": "10.0.0.1, lan"},
            "QUOTECLIP_TRUSTED_PROXIES has 'lan', which is not an IP address or network",
        ),
        (
            {"QUOTECLIP_ENCODER_PRESET": "placebo"},
            "QUOTECLIP_ENCODER_PRESET must be one of veryfast, superfast, ultrafast, got 'placebo'",
        ),
        (
            {"QUOTECLIP_PROXY": "socks5://proxy:1080"},
            "QUOTECLIP_PROXY must be a URL like http://proxy.internal:3128 (http, a host and a port)",
        ),
        ({"QUOTECLIP_PROXY": "http://proxy:port"}, "QUOTECLIP_PROXY must be a URL like http://proxy.internal:3128"),
    ):
        with pytest.raises(BadInput) as refused:
            Settings.from_env(env)
        assert str(refused.value) == message
