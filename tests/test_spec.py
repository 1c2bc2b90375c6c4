from __future__ import annotations

import math

import pytest

from quoteclip.errors import BadInput
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, WatermarkSpec, build_spec, format_time, parse_time


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1134.5", 1134.5),
        ("18:54.0", 1134.0),
        ("18:54", 1134.0),
        ("0:18:54.250", 1134.25),
        ("1:02:03.5", 3723.5),
        ("75:00", 4500.0),
        (7, 7.0),
        (7.12345, 7.123),
        ("  12.5 ", 12.5),
    ],
)
def test_parse_time_forms(text: object, seconds: float) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must be seconds"),
        ("abc", "must be seconds"),
        ("1:2:3:4", "must be seconds"),
        ("12:60", "seconds place"),
        ("1:60:00", "minutes place"),
        ("-3", "must be seconds"),
        (-3, "must not be negative"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        (True, "must be a time"),
        ([1], "must be seconds"),
        ("1e3", "must be seconds"),
        ("99999999999:00:01.000", "past 24 hours"),  # (a transcript's cue time once gave a start of 3.6e14 s)
        (86400.001, "past 24 hours"),
        (1e300, "past 24 hours"),
    ],
)
def test_parse_time_refuses(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_time(text, "start")


def test_format_time() -> None:
    assert format_time(723.0) == "12:03.000"
    assert format_time(3723.5) == "1:02:03.500"


def test_spec_is_frozen_and_normalised() -> None:
    spec = ClipSpec(source=" clip.mp4 ", start="18:54.0", end="19:01", caption="  hi  ")
    assert (spec.source, spec.start, spec.end, spec.caption, spec.duration) == ("clip.mp4", 1134.0, 1141.0, "hi", 7.0)
    assert spec.size == (1280, 720)
    with pytest.raises(Exception, match="frozen"):
        spec.start = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"end": 5}, "end must be after start, got start=10.0 end=5.0"),
        ({"end": 10}, "end must be after start"),
        ({"end": 700}, "over the 600 s limit"),
        ({"start": -1}, "start: start must not be negative"),
        ({"start": "ten"}, "start: start must be seconds"),
        ({"caption": "x" * 1001}, "caption: String should have at most 1000 characters"),
        (
            {"profile": "tiktok"},
            "profile: Input should be 'landscape', 'vertical', 'square' or 'portrait', got 'tiktok'",
        ),
        ({"fit": "stretch"}, "fit: Input should be 'pad', 'blur', 'center' or 'speaker'"),
        ({"quality": "best"}, "quality: Input should be 'final', 'preview' or 'instant'"),
        ({"pad_before": 11}, "pad_before: Input should be less than or equal to 10"),
        ({"words": [{"text": "a", "start": 5, "end": 4}]}, "word end must not be before its start"),
        ({"words": [{"text": "", "start": 5, "end": 6}]}, "words.0.text"),
        ({"style": {"highlight": "yellow"}}, "style.highlight: String should match pattern"),
        ({"style": {"preset": "neon"}}, "style.preset"),
        ({"source": ""}, "source"),
        ({"source": "a\nb"}, "source must be a path or URL on one line"),
        ({"font": "asset:abc.ttf"}, "font must be asset:<64 hex digits>.<ext>"),
        ({"font": "brand:../x.ttf"}, "font must be brand:NAME"),
        ({"watermark": {"logo": "asset:" + "0" * 64 + ".ttf"}}, "watermark.logo must be a .png file"),
        ({"font": "/etc/passwd"}, "font must be a .ttf, .otf or .ttc file"),
        ({"watermark": {"text": "a", "opacity": 2}}, "watermark.opacity: Input should be less than or equal to 1"),
        ({"watermark": {}}, "watermark needs exactly one of text or logo"),
        ({"watermark": {"logo": "brand.jpg"}}, "watermark.logo must be a .png file"),
        ({"bogus": 1}, "bogus: Extra inputs are not permitted"),
        ({"encoder_preset": "veryslow"}, "encoder_preset: Input should be 'veryfast', 'superfast' or 'ultrafast'"),
    ],
)
def test_bad_specs_name_field_and_value(changes: dict[str, object], message: str) -> None:
    data: dict[str, object] = {"source": "clip.mp4", "start": 10, "end": 17, **changes}
    with pytest.raises(BadInput) as info:
        build_spec(data)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_length_cap_is_configurable() -> None:
    data = {"source": "a.mp4", "start": 0, "end": 200}
    assert build_spec(data, max_seconds=300).duration == 200
    with pytest.raises(BadInput, match="over the 30 s limit"):
        build_spec({"source": "a.mp4", "start": 0, "end": 31}, max_seconds=30)


def test_brand_text_or_logo() -> None:
    assert WatermarkSpec.from_brand("StarZero").text == "StarZero"
    assert WatermarkSpec.from_brand("/brand/logo.PNG").logo == "/brand/logo.PNG"


def test_settings_from_env() -> None:
    s = Settings.from_env(
        {
            "REDIS_URL": "redis://r:1/2",
            "QUOTECLIP_STORAGE_DIR": "/data/clips",
            "QUOTECLIP_LINK_TTL": "60",
            "QUOTECLIP_SOURCE_HOSTS": "127.0.0.1, Example.com",
            "QUOTECLIP_ALLOW_LOCAL_SOURCES": "false",
        }
    )
    assert s.redis_url == "redis://r:1/2"
    assert str(s.storage_dir) == "/data/clips"
    assert s.link_ttl == 60
    assert s.source_hosts == ("127.0.0.1", "example.com")
    assert s.allow_local_sources is False
    assert not s.uses_s3
    assert Settings.from_env({"QUOTECLIP_REDIS_URL": "redis://a", "REDIS_URL": "redis://b"}).redis_url == "redis://a"
    with pytest.raises(BadInput, match="QUOTECLIP_LINK_TTL must be a number, got 'soon'"):
        Settings.from_env({"QUOTECLIP_LINK_TTL": "soon"})
    with pytest.raises(BadInput, match="QUOTECLIP_ALLOW_LOCAL_SOURCES must be true or false"):
        Settings.from_env({"QUOTECLIP_ALLOW_LOCAL_SOURCES": "maybe"})


def test_encoder_preset_request_then_operator_then_product() -> None:
    """A request's preset wins; else the operator's (QUOTECLIP_ENCODER_PRESET); else veryfast (None: not named;
    the key treats it as veryfast, tests/test_render.py)."""
    data = {"source": "a.mp4", "start": 0, "end": 2}
    assert build_spec(data).encoder_preset is None
    assert build_spec({**data, "encoder_preset": "veryfast"}, encoder_preset="ultrafast").encoder_preset == "veryfast"
    assert build_spec(data, encoder_preset="ultrafast").encoder_preset == "ultrafast"
    assert build_spec({**data, "encoder_preset": None}, encoder_preset="ultrafast").encoder_preset == "ultrafast"
    assert build_spec({**data, "encoder_preset": "superfast"}, encoder_preset="ultrafast").encoder_preset == "superfast"
    assert Settings.from_env({"QUOTECLIP_ENCODER_PRESET": "superfast"}).encoder_preset == "superfast"
    assert Settings.from_env({}).encoder_preset is None
    with pytest.raises(BadInput, match="QUOTECLIP_ENCODER_PRESET must be one of veryfast, superfast, ultrafast, got"):
        Settings.from_env({"QUOTECLIP_ENCODER_PRESET": "placebo"})


def test_cli_and_queue_defaults_differ() -> None:
    base = Settings.from_env({})
    assert base.for_cli().allow_local_sources is True and base.for_cli().source_hosts == ("*",)
    queue = base.for_queue()
    assert queue.allow_local_sources is False and "youtube.com" in (queue.source_hosts or ())
    set_ = Settings.from_env({"QUOTECLIP_SOURCE_HOSTS": "cdn.example", "QUOTECLIP_ALLOW_LOCAL_SOURCES": "yes"})
    assert set_.for_queue().source_hosts == ("cdn.example",) and set_.for_queue().allow_local_sources is True
    assert set_.for_cli().source_hosts == ("cdn.example",)
    with pytest.raises(BadInput, match="QUOTECLIP_ALLOW_ADDRESSES has 'lan', which is not an IP address"):
        Settings.from_env({"QUOTECLIP_ALLOW_ADDRESSES": "lan"})
