"""Hostile input: every field of the spec fuzzed, API bodies, captions that try to break out of markup.

Property: building a spec either succeeds or raises BadInput with a one-line message; nothing else escapes.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quoteclip.errors import BadInput
from quoteclip.spec import MAX_CAPTION_CHARS, build_spec

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)
FIELDS = [
    "source",
    "start",
    "end",
    "caption",
    "font",
    "caption_size",
    "words",
    "style",
    "watermark",
    "profile",
    "fit",
    "quality",
    "pad_before",
    "pad_after",
    "fades",
    "encoder_preset",
]


def _check(data: object) -> None:
    try:
        spec = build_spec(data)  # type: ignore[arg-type]
    except BadInput as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message
        return
    assert spec.end > spec.start >= 0 and math.isfinite(spec.end) and len(spec.caption) <= MAX_CAPTION_CHARS


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(FIELDS), JSONISH, max_size=8))
def test_any_field_values_are_refused_cleanly_or_valid(data: dict[str, object]) -> None:
    _check({"source": "clip.mp4", "start": 1, "end": 2, **data})


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.floats(), st.integers(min_value=-(10**30), max_value=10**30), st.text(max_size=30)),
    st.one_of(st.floats(), st.integers(min_value=-(10**30), max_value=10**30), st.text(max_size=30)),
)
def test_times_of_every_kind(start: object, end: object) -> None:
    _check({"source": "clip.mp4", "start": start, "end": end})


@settings(max_examples=150, deadline=None)
@given(st.text(min_size=0, max_size=2000))
def test_caption_text_of_every_kind(caption: str) -> None:
    _check({"source": "clip.mp4", "start": 1, "end": 2, "caption": caption})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"start": float("nan")}, "start must be a finite time"),
        ({"end": float("inf")}, "end must be a finite time"),
        ({"start": -0.5}, "start must not be negative"),
        ({"end": 1e300}, "end is past 24 hours"),
        ({"caption": "x" * 1_000_000}, "caption: String should have at most 1000 characters"),
        ({"source": "clip.mp4\x00"}, "source must be a path or URL on one line"),
        ({"source": "a\r\nb"}, "source must be a path or URL on one line"),
        ({"caption": "nul \x00 inside"}, "caption must not contain NUL characters"),
        ({"watermark": {"text": "bad\x07bell"}}, "watermark.text must be printable text"),
        ({"watermark": {"logo": "../../etc/passwd"}}, "watermark.logo must be a .png file"),
        ({"font": "../../../etc/shadow"}, "font must be a .ttf, .otf or .ttc file"),
        ({"start": [1]}, "start must be seconds"),
        ({"start": {"$gt": 0}}, "start must be seconds"),
        ({"words": "one two"}, "words: Input should be a valid tuple, got 'one two'"),
        ({"words": [{"text": "a", "start": 1}]}, "words.0.end: Field required"),
        ({"words": [1]}, "words.0: Input should be a dictionary or an instance of Word, got 1"),
    ],
)
def test_fixed_hostile_cases(fields: dict[str, object], message: str) -> None:
    with pytest.raises(BadInput) as info:
        build_spec({"source": "clip.mp4", "start": 1, "end": 2, **fields})
    assert message in str(info.value), str(info.value)


def test_invalid_utf8_and_control_characters_through_the_api(queue_env) -> None:
    from fastapi.testclient import TestClient

    from api import create_app
    from quoteclip.settings import Settings

    client = TestClient(create_app(Settings.from_env(queue_env)))
    raw = b'{"source": "http://127.0.0.1/x.mp4", "start": 1, "end": 2, "caption": "\xff\xfe"}'
    bad = client.post("/clips", content=raw, headers={"Content-Type": "application/json"})
    assert bad.status_code in (400, 422) and bad.json()["detail"] and "Traceback" not in bad.text
    for body in ([1, 2], "text", {"source": {"nested": True}, "start": 1, "end": 2}, {"source": "x", "start": None}):
        response = client.post("/clips", content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert response.status_code == 422, body
    assert client.post("/clips", content=b"{", headers={"Content-Type": "application/json"}).status_code == 422


def test_markup_in_captions_renders_literally(media, settings) -> None:
    """ffmpeg filter syntax, ASS override tags and libass line breaks in a caption are only pixels."""
    from pathlib import Path

    from jobs.pipeline.produce import produce_clip
    from storage import LocalStorage

    nasty = r"';:\,[]{}%{pts} {\pos(1,1)}\N{\b1} [in]drawtext=text=x[out]; movie=/etc/passwd"
    src = media(size="320x180", duration=3, gop=60)
    result = produce_clip(
        build_spec({"source": str(src), "start": 0.5, "end": 2, "caption": nasty}),
        settings,
        LocalStorage(settings.storage_dir),
    )
    srt = Path(str(result.path)).with_suffix(".srt").read_text()
    assert r"{\pos(1,1)}\N{\b1}" in srt and "movie=/etc/passwd" in srt  # kept as text


def test_download_names_never_escape_the_storage_prefix(media, settings) -> None:
    from jobs.pipeline.keys import download_name
    from storage.s3 import content_disposition

    spec = build_spec({"source": "../../x.mp4", "start": 1, "end": 2, "caption": '../../etc/passwd"; rm -rf /'})
    name = download_name(spec, "a" * 32)
    assert "/" not in name and ".." not in name and '"' not in name
    assert content_disposition('../"evil"\r\nX-Header: 1.mp4') == 'attachment; filename="evilX-Header1.mp4"'


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"source": "http://127.0.0.1/x.mp4", "start": NaN, "end": 2}', "start"),
        (b'{"source": "http://127.0.0.1/x.mp4", "start": 1, "end": Infinity}', "end"),
        (
            b'{"source": "http://127.0.0.1/x.mp4", "start": 1, "end": 2, "watermark": {"text": "a", "opacity": NaN}}',
            "watermark.opacity",
        ),
        (b'{"source": "http://[::1/x.mp4", "start": 1, "end": 2}', "source URL is malformed"),
        ('{"source": "http://ｅｘａｍｐｌｅ.com/x.mp4", "start": 1, "end": 2}'.encode(), "must be ASCII"),
        (b'{"source": "HTTP://evil.example/x.mp4", "start": 1, "end": 2}', "scheme must be written in lower case"),
    ],
)
def test_malformed_api_input_is_a_422_naming_the_field(queue_env, raw: bytes, field: str) -> None:
    from fastapi.testclient import TestClient

    from api import create_app
    from quoteclip.settings import Settings

    client = TestClient(create_app(Settings.from_env(queue_env)))
    response = client.post("/clips", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]


def test_job_ids_with_trailing_newlines_are_unknown(queue_env) -> None:
    from fastapi.testclient import TestClient

    from api import create_app
    from quoteclip.settings import Settings

    client = TestClient(create_app(Settings.from_env(queue_env)))
    assert client.get("/clips/clip-" + "0" * 32 + "%0A").status_code == 404
    from jobs.queue import job_status

    with pytest.raises(BadInput, match="job_id must look like"):
        job_status("clip-" + "0" * 32 + "\n", Settings.from_env(queue_env))
