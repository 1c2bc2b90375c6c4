"""The clip request: one validated, immutable record of JSON-able values."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from . import assets
from .errors import BadInput
from .links import MAX_SECONDS
from .platforms import PLATFORMS, PlatformName

DEFAULT_MAX_SECONDS = 600.0  # a long cut renders in pieces across the workers (jobs/pieces.py)
MAX_CAPTION_CHARS = 1000
READING_CHARS_PER_SECOND = 25  # above this a caption is rendered, with a warning: too fast to read
MAX_SOURCE_CHARS = 4096

# Output profiles: name -> (width, height).
PROFILES: dict[str, tuple[int, int]] = {
    "landscape": (1280, 720),
    "vertical": (720, 1280),
    "square": (720, 720),
    "portrait": (720, 900),
}
ProfileName = Literal["landscape", "vertical", "square", "portrait"]
Corner = Literal["top-left", "top-right", "bottom-left", "bottom-right"]
Fit = Literal["pad", "blur", "center", "speaker"]
Quality = Literal["final", "preview", "instant"]  # instant: the source's frames copied (renderer/instant.py)
# x264 presets a final render may use: the product's (veryfast) and two that spend less CPU per clip for larger
# files (figure 5c in BENCHMARKS.md gives their CPU, size and SSIM/PSNR against veryfast). Slower presets are not
# offered: a request must not be able to make a worker spend more than the product's own settings.
EncoderPreset = Literal["veryfast", "superfast", "ultrafast"]
DEFAULT_ENCODER_PRESET = "veryfast"
MAX_WORDS = 2000
WORDS_PER_SECOND = 10  # timed words a clip may carry per second (speech runs at 2–4), plus WORDS_SLACK
WORDS_SLACK = 20
_HEX = r"^#[0-9A-Fa-f]{6}$"

MAX_TIME = MAX_SECONDS  # the latest start or end any clip names (24 hours), as a signed link's bound

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def parse_time(value: object, field: str = "time") -> float:
    """Seconds from ``1134.5``, ``MM:SS(.fff)`` or ``HH:MM:SS(.fff)`` (or a number)."""
    if isinstance(value, bool):
        raise ValueError(f"{field} must be a time, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_timecode(value.strip(), field)
    else:
        raise ValueError(f"{field} must be seconds or HH:MM:SS(.fff), got {value!r}")
    if not math.isfinite(seconds):
        raise ValueError(f"{field} must be a finite time, got {value!r}")
    if seconds < 0:
        raise ValueError(f"{field} must not be negative, got {value!r}")
    if seconds > MAX_TIME:
        raise ValueError(f"{field} is past 24 hours, the latest time a clip may name, got {str(value)[:40]!r}")
    return round(seconds, 3)


def _parse_timecode(text: str, field: str) -> float:
    parts = text.split(":")
    bad = ValueError(f"{field} must be seconds, MM:SS(.fff) or HH:MM:SS(.fff), got {text!r}")
    if not text or len(parts) > 3:
        raise bad
    if not re.fullmatch(r"\d+(\.\d+)?", parts[-1]) or not all(p.isdigit() for p in parts[:-1]):
        raise bad
    seconds = float(parts[-1])
    if len(parts) > 1 and seconds >= 60:
        raise ValueError(f"{field} has {parts[-1]} in its seconds place (must be below 60), got {text!r}")
    if len(parts) == 3 and int(parts[1]) >= 60:
        raise ValueError(f"{field} has {parts[1]} in its minutes place (must be below 60), got {text!r}")
    total = 0.0
    for part in parts[:-1]:
        total = total * 60 + int(part)
    return total * 60 + seconds if len(parts) > 1 else seconds


def format_time(seconds: float) -> str:
    """``H:MM:SS.fff`` (or ``M:SS.fff`` under an hour) for messages."""
    ms = round(seconds * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s = rest / 1000
    return f"{h}:{m:02d}:{s:06.3f}" if h else f"{m}:{s:06.3f}"


def _time_field(value: object, info: ValidationInfo) -> float:
    return parse_time(value, info.field_name or "time")


# A time field: seconds or a timecode in, seconds (to the millisecond) out; messages name the field.
Time = Annotated[float, BeforeValidator(_time_field)]


def snap_cut(start: float, end: float, words: Sequence[Word]) -> tuple[float, float]:
    """A cut's ends moved to word boundaries: an end inside a word (after its start, before its end) goes to the
    nearer of the word's two boundaries, the start keeping the word on a tie and the end likewise; an end between
    words stays. Were the nearer boundaries to leave no clip, each end keeps its word whole instead."""

    def inside(t: float) -> Word | None:
        return next((w for w in words if w.start < t < w.end), None)

    at, until = inside(start), inside(end)
    to_start = start if at is None else (at.start if start - at.start <= at.end - start else at.end)
    to_end = end if until is None else (until.end if until.end - end <= end - until.start else until.start)
    if to_end <= to_start:
        to_start = start if at is None else at.start
        to_end = end if until is None else until.end
    return round(to_start, 3), round(to_end, 3)


def snap_moves(start: float, end: float, to_start: float, to_end: float) -> dict[str, dict[str, float]]:
    """The ends a snap moved: ``{"start": {"from", "to", "by"}}`` for each that moved."""
    return {
        name: {"from": asked, "to": to, "by": round(to - asked, 3)}
        for name, asked, to in (("start", start, to_start), ("end", end, to_end))
        if to != asked
    }


def snap_said(moves: Mapping[str, Mapping[str, float]]) -> tuple[str, ...]:
    """What a snap moved, said: ``snap: the start moved 120 ms earlier, to the word boundary at 0.880 s (…)``."""
    return tuple(
        f"snap: the {name} moved {abs(move['by']) * 1000:.0f} ms {'earlier' if move['by'] < 0 else 'later'}, "
        f"to the word boundary at {move['to']:.3f} s (asked {move['from']:.3f} s)"
        for name, move in moves.items()
    )


class WatermarkSpec(BaseModel):
    """A brand mark: text drawn with the caption font, or a PNG logo (see ``quoteclip.assets`` for its forms)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    text: str | None = Field(default=None, max_length=64)
    logo: str | None = Field(default=None, max_length=MAX_SOURCE_CHARS)
    position: Corner = "top-right"
    opacity: float = Field(default=0.8, ge=0.05, le=1.0)
    size: float = Field(default=0.06, ge=0.02, le=0.3, description="height of the mark / the frame's short side")
    margin: float = Field(default=0.03, ge=0.0, le=0.2, description="margin / the frame's short side")

    @model_validator(mode="after")
    def _one_kind(self) -> WatermarkSpec:
        if (self.text is None) == (self.logo is None):
            raise ValueError("watermark needs exactly one of text or logo")
        if self.text is not None and (not self.text.strip() or _CONTROL.search(self.text)):
            raise ValueError(f"watermark.text must be printable text, got {self.text!r}")
        if self.logo is not None:
            assets.check_ref(self.logo, "watermark.logo", (".png",))
        return self

    @classmethod
    def from_brand(cls, brand: str, **options: Any) -> WatermarkSpec:
        """``StarZero`` is a text mark; a path ending in ``.png`` is a logo."""
        if brand.lower().endswith(".png"):
            return cls(logo=brand, **options)
        return cls(text=brand, **options)


def _word_text(v: str) -> str:
    if _CONTROL.search(v) or not v.strip():
        raise ValueError(f"word text must be printable, got {v!r}")
    return v.strip()


@dataclass(frozen=True)
class Word:
    """One spoken word with its times, in seconds: source time in a spec or a transcript, clip time once cut.

    The one word type of the project. A spec's words are validated (times or timecodes in, printable text of
    at most 64 characters); words made by code are plain records."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    text: Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_word_text)]
    start: Time
    end: Time

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"word end must not be before its start, got start={self.start} end={self.end}")


_WORDS = TypeAdapter(tuple[Word, ...])


class CaptionStyle(BaseModel):
    """How captions look: a preset plus brand colours and placement."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    preset: Literal["clean", "bold-outline", "boxed", "karaoke"] = "boxed"
    color: str = Field(default="#FFFFFF", pattern=_HEX)
    highlight: str = Field(default="#FFD400", pattern=_HEX)
    box: str = Field(default="#000000", pattern=_HEX)
    position: Literal["bottom", "middle", "top"] = "bottom"
    max_lines: int = Field(default=2, ge=1, le=3)
    uppercase: bool = False
    # The margins the captions keep clear of, as shares of the frame: at the bottom (of its height), and at the right
    # (of its width; the lines stay centred, so the left keeps as much). None: the profile's own. A platform preset
    # sets them to its app's overlay zones (quoteclip/platforms.py).
    bottom_safe: float | None = Field(default=None, ge=0.0, le=0.5)
    right_safe: float | None = Field(default=None, ge=0.0, le=0.3)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # margins not set are left out: a style without them dumps (and so keys its clip) as before they existed
        data: dict[str, Any] = handler(self)
        for name in ("bottom_safe", "right_safe"):
            if data.get(name, 0) is None:
                del data[name]
        return data


class ClipSpec(BaseModel):
    """Everything that decides a clip. Built once, validated when built, never mutated.

    The clip-length cap is the operator's setting: ``build_spec`` applies it (``context={"max_seconds": N}``);
    a model validated without that context applies none.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS)
    start: Time
    end: Time
    caption: str = Field(default="", max_length=MAX_CAPTION_CHARS)
    font: str | None = Field(default=None, max_length=MAX_SOURCE_CHARS)
    caption_size: float = Field(default=0.055, ge=0.02, le=0.15, description="font size / the frame's short side")
    words: tuple[Word, ...] | None = Field(default=None, max_length=MAX_WORDS)
    style: CaptionStyle = CaptionStyle()
    watermark: WatermarkSpec | None = None
    profile: ProfileName = "landscape"
    fit: Fit = "pad"
    quality: Quality = "final"
    pad_before: float = Field(default=0.0, ge=0.0, le=10.0)
    pad_after: float = Field(default=0.0, ge=0.0, le=10.0)
    fades: bool = True  # a 150 ms fade of the sound in and out (no click at the cut)
    video_fades: bool = False  # fade the picture from and to black too (the first frame is then black)
    # An audiogram's background (audio-only sources without artwork): a colour #rrggbb or a PNG/JPEG brand image.
    background: str | None = Field(default=None, max_length=MAX_SOURCE_CHARS)
    # The x264 preset of a final render; None: not named (the operator's, else veryfast). Previews and instant
    # clips ignore it.
    encoder_preset: EncoderPreset | None = None
    # A platform preset (quoteclip/platforms.py): its shape, caption margins, longest clip, loudness and limits.
    platform: PlatformName | None = None
    # The sound levelled to this integrated loudness (EBU R128, LUFS) by one gain, its true peak kept under
    # TRUE_PEAK; None: the source's sound as it is (the default; a platform preset's otherwise). "off": None.
    loudness: float | None = Field(default=None, ge=-40.0, le=-5.0)
    # Pauses inside the quote longer than this many seconds shortened to it, cut at word boundaries
    # (renderer/tighten.py); None: the exact quote (the default).
    tighten: float | None = Field(default=None, ge=0.1, le=10.0)

    # ``snap: words`` asked: how far each end of the cut was moved to a word boundary ({"start": {"from", "to",
    # "by"}}, the ends moved only), said to the caller. Never dumped: not part of the clip, nor of its key.
    snapped: SkipJsonSchema[dict[str, dict[str, float]] | None] = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _snap(cls, data: Any) -> Any:
        """``snap: "words"``: the cut's ends moved to the nearest word boundaries of its words (``snap_cut``), the
        move recorded in ``snapped``; the instruction itself is not kept (a spec read back does not move again). A
        request whose quote is found later by its words keeps it until its spec is built with them."""
        if not isinstance(data, dict):
            return data
        data = {k: v for k, v in data.items() if k != "snapped"}
        snap = data.get("snap")
        if snap is None:
            data.pop("snap", None)
            return data
        if snap != "words":
            raise ValueError(f"snap: words is the one snap there is (to the quote's word boundaries), got {snap!r}")
        start, end, words = data.get("start"), data.get("end"), data.get("words")
        if start is None or end is None or (not words and data.get("transcript") is not None):
            return data  # (found by its words later: snapped when its spec is built)
        if not words:
            raise ValueError(
                "snap: words moves the cut's ends to word boundaries, so it needs the quote's words: give words, "
                "a transcript (--transcript), or transcript: source (the page's captions)"
            )
        try:
            first, last = parse_time(start, "start"), parse_time(end, "end")
            timed = _WORDS.validate_python(words)
        except (ValueError, ValidationError):
            return data  # (the fields' own checks say what is wrong)
        to_start, to_end = snap_cut(first, last, timed)
        data.pop("snap")
        return {**data, "start": to_start, "end": to_end, "snapped": snap_moves(first, last, to_start, to_end)}

    @model_validator(mode="before")
    @classmethod
    def _platform_preset(cls, data: Any) -> Any:
        """A platform's preset filled in: its profile (another one named is refused), its loudness and caption
        margins unless given. ``loudness: "off"`` is no levelling, even on a platform."""
        if not isinstance(data, dict):
            return data
        level = data.get("loudness")
        if isinstance(level, str):
            if level.strip().lower() == "off":
                data = {**data, "loudness": None}
            elif not re.fullmatch(r"\s*[-+]?\d+(\.\d+)?\s*", level):
                raise ValueError(f"loudness: a target in LUFS (such as -14) or off, got {level[:40]!r}")
        name = data.get("platform")
        if not isinstance(name, str) or name not in PLATFORMS:
            return data  # (none, or a name the field refuses)
        preset = PLATFORMS[name]
        data = dict(data)
        if data.get("profile") not in (None, preset.profile):
            raise ValueError(
                f"profile: platform {name} renders {preset.profile}, got profile {data['profile']!r} "
                "(leave the profile out)"
            )
        data["profile"] = preset.profile
        data.setdefault("loudness", preset.loudness)
        style = data.get("style") or {}
        if isinstance(style, CaptionStyle):
            style = style.model_dump()
        if isinstance(style, dict):
            style = dict(style)
            if preset.bottom_safe is not None:
                style.setdefault("bottom_safe", preset.bottom_safe)
            if preset.right_safe is not None:
                style.setdefault("right_safe", preset.right_safe)
            data["style"] = style
        return data

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # fields added later are left out when not used: a clip without them dumps (and keys) as before. A
        # platform's clip keeps its loudness, None included (so "off" stays off when the spec is read back).
        data: dict[str, Any] = handler(self)
        if data.get("platform", 0) is None:
            del data["platform"]
            if data.get("loudness", 0) is None:
                del data["loudness"]
        if data.get("tighten", 0) is None:
            del data["tighten"]
        return data

    @field_validator("background")
    @classmethod
    def _background(cls, v: str | None) -> str | None:
        if v is None or re.fullmatch(r"#[0-9a-fA-F]{6}", v):
            return v.lower() if v else v
        if v.startswith("#"):
            raise ValueError(f"background colour must be #rrggbb, got {v[:40]!r}")
        return assets.check_ref(v, "background", (".png", ".jpg", ".jpeg"))

    @field_validator("watermark", mode="before")
    @classmethod
    def _watermark_text(cls, v: object) -> object:
        return {"text": v} if isinstance(v, str) else v  # "StarZero": a text mark (a logo is {"logo": …})

    @field_validator("fit", mode="before")
    @classmethod
    def _fit_alias(cls, v: object) -> object:
        return "blur" if v == "blur-fill" else v

    @field_validator("source")
    @classmethod
    def _source_text(cls, v: str) -> str:
        v = v.strip()
        if not v or _CONTROL.search(v) or "\n" in v:
            raise ValueError(f"source must be a path or URL on one line, got {v!r}")
        return v

    @field_validator("caption")
    @classmethod
    def _caption(cls, v: str) -> str:
        if "\x00" in v:
            raise ValueError("caption must not contain NUL characters")
        return v.strip()

    @field_validator("font")
    @classmethod
    def _font(cls, v: str | None) -> str | None:
        if v is None:
            return v
        return assets.check_ref(v, "font", assets.FONT_SUFFIXES)  # (whether it exists is checked where it is read)

    @model_validator(mode="after")
    def _span(self, info: ValidationInfo) -> ClipSpec:
        if self.end <= self.start:
            raise ValueError(f"end must be after start, got start={self.start} end={self.end}")
        if self.platform is not None and self.duration > PLATFORMS[self.platform].max_seconds:
            raise ValueError(
                f"platform {self.platform} takes at most {PLATFORMS[self.platform].max_seconds:g} s; "
                f"this quote is {self.duration:g} s"
            )
        if self.loudness is not None and self.quality == "instant":
            raise ValueError(
                "loudness: an instant clip copies the source's sound as it is; level it in a final or preview "
                "render (or give loudness off)"
            )
        if self.tighten is not None and self.quality == "instant":
            raise ValueError(
                "tighten: an instant clip copies the source's frames as they are; tighten the pauses in a final or "
                "preview render"
            )
        limit = (info.context or {}).get("max_seconds")
        if limit is not None and self.end - self.start > float(limit):
            raise ValueError(
                f"end makes the clip {self.end - self.start:.3f} s long, over the {limit:g} s limit "
                f"(start={self.start} end={self.end})"
            )
        return self

    @model_validator(mode="after")
    def _word_rate(self) -> ClipSpec:
        if self.words is not None:
            allowed = WORDS_SLACK + int(WORDS_PER_SECOND * self.duration)
            if len(self.words) > allowed:
                raise ValueError(
                    f"words: at most {WORDS_PER_SECOND} a second of clip (+{WORDS_SLACK}), got {len(self.words)} "
                    f"words for a {self.duration:.3f} s clip"
                )
        return self

    @property
    def warnings(self) -> tuple[str, ...]:
        """What is rendered but worth saying: a cut's end moved to a word boundary (``snap``), a caption faster
        than people read (pages shown too briefly)."""
        said = list(snap_said(self.snapped or {}))
        spoken = self.end - self.start
        rate = len(self.caption) / spoken if spoken > 0 else 0.0
        if rate > READING_CHARS_PER_SECOND:
            said.append(
                f"caption: {len(self.caption)} characters in {spoken:.3f} s is {rate:.0f} characters a second, "
                f"faster than people read (about {READING_CHARS_PER_SECOND} at most): its pages show too briefly"
            )
        return tuple(said)

    @property
    def cut_start(self) -> float:
        """Where the clip starts in the source: the quote's start less the padding (never before 0)."""
        return round(max(0.0, self.start - self.pad_before), 3)

    @property
    def cut_end(self) -> float:
        return round(self.end + self.pad_after, 3)

    @property
    def duration(self) -> float:
        """The clip's length, padding included."""
        return round(self.cut_end - self.cut_start, 3)

    @property
    def size(self) -> tuple[int, int]:
        """Output size: the profile's, halved for previews."""
        width, height = PROFILES[self.profile]
        if self.quality == "preview":
            return width // 2 // 2 * 2, height // 2 // 2 * 2
        return width, height


def build_spec(
    data: dict[str, Any], max_seconds: float = DEFAULT_MAX_SECONDS, encoder_preset: str | None = None
) -> ClipSpec:
    """Validate ``data`` into a ClipSpec, turning pydantic's report into one readable BadInput.
    ``encoder_preset``: the operator's (``QUOTECLIP_ENCODER_PRESET``), for a request that does not name one."""
    if encoder_preset is not None and data.get("encoder_preset") is None:
        data = {**data, "encoder_preset": encoder_preset}
    try:
        return ClipSpec.model_validate(data, context={"max_seconds": max_seconds})
    except ValidationError as exc:
        raise BadInput(describe_validation_error(exc)) from None


def _path_part(part: object) -> str:
    """A field name as it is when it is a plain name or index; quoted (control characters escaped) otherwise."""
    text = str(part)
    return text if re.fullmatch(r"[\w-]{1,64}", text) else repr(text[:64])


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming the field and the value, e.g. ``end: end must be after start, got …``."""
    return describe_errors(exc.errors(include_url=False))


def describe_errors(errors: Sequence[Mapping[str, Any]], skip: tuple[str, ...] = ()) -> str:
    """pydantic's error records as one line (location parts in ``skip``, such as FastAPI's "body", left out)."""
    lines = []
    for err in errors:
        msg = str(err["msg"]).removeprefix("Value error, ")
        field = ".".join(_path_part(p) for p in err["loc"] if p not in skip)
        if not field:  # a check across fields: it names its field itself ("end must be after start, …")
            lines.append(msg)
            continue
        value = err.get("input")
        shown = repr(value) if not isinstance(value, dict) else "{…}"
        if len(shown) > 80:
            shown = shown[:77] + "…"
        if "got" in msg or err["type"] == "missing":
            lines.append(f"{field}: {msg}")
        else:
            lines.append(f"{field}: {msg}, got {shown}")
    return "; ".join(lines)


def parse_profiles(value: str | Sequence[str]) -> tuple[str, ...]:
    """``landscape,vertical,square`` (or a list): the profiles one quote is rendered in, in order, each once."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(n, str) for n in items):
        raise BadInput(f"profiles: a list of profile names ({', '.join(PROFILES)}), got {str(value)[:80]!r}")
    names = [n.strip().lower() for n in items]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in PROFILES]
    if unknown:
        raise BadInput(f"profiles: unknown profile {unknown[0][:40]!r} (one of {', '.join(PROFILES)})")
    if not names:
        raise BadInput(f"profiles: name at least one of {', '.join(PROFILES)}")
    return tuple(dict.fromkeys(names))


def in_profiles(spec: ClipSpec, profiles: tuple[str, ...]) -> list[ClipSpec]:
    """The same quote in each profile (each its own clip, key and link). A platform's clip has its platform's shape
    only."""
    if spec.platform is not None and profiles != (spec.profile,):
        raise BadInput(
            f"profiles: platform {spec.platform} sets the shape ({spec.profile}); name platforms or profiles, not both"
        )
    return [spec.model_copy(update={"profile": name}) for name in profiles]
