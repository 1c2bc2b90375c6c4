"""Request and answer bodies of the API (the OpenAPI schema is built from these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from quoteclip.spec import MAX_CAPTION_CHARS, PROFILES, ClipSpec, ProfileName, Time

MAX_BATCH = 100


class ClipRequest(ClipSpec):
    """A clip spec, plus where to POST when it is done."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    callback_url: str | None = Field(default=None, max_length=2048)
    # several shapes of the quote from one decode, each its own clip (answered as {"clips": [...]})
    profiles: list[ProfileName] | None = Field(default=None, min_length=1, max_length=len(PROFILES))
    # transcript: "source" with quote: the quote found by its words in the page's own captions (api/quotes.py),
    # which give start and end (so they may be left out), its words' times and its caption.
    transcript: Literal["source"] | None = None
    quote: str | None = Field(default=None, max_length=MAX_CAPTION_CHARS)
    # snap: "words" (ClipSpec._snap), applied when the request's spec is built (after its quote is found)
    snap: Literal["words"] | None = None
    start: Time | None = None  # type: ignore[assignment]
    end: Time | None = None  # type: ignore[assignment]

    @model_validator(mode="before")
    @classmethod
    def _snap(cls, data: Any) -> Any:
        """A request keeps ``snap`` as asked: the spec built from it moves the cut (and says so in its warnings).
        What a snap moved is never a request's to say."""
        return {k: v for k, v in data.items() if k != "snapped"} if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _span(self, info: ValidationInfo) -> ClipRequest:
        """Start and end are needed unless the quote is found in the page's captions (api/quotes.py); given, they
        are checked as a spec's are (the clip's checks run again when its spec is built from the request)."""
        if self.start is None or self.end is None:
            if self.transcript is None:
                name = "start" if self.start is None else "end"
                raise ValueError(f'{name}: required (or give transcript: "source" and quote to find the quote)')
            return self
        return _spec_check("_span")(self, info)

    @model_validator(mode="after")
    def _word_rate(self) -> ClipRequest:
        return self if self.start is None or self.end is None else _spec_check("_word_rate")(self)


def _spec_check(name: str) -> Any:
    """One of ClipSpec's own checks across fields, which ClipRequest runs once its start and end are known."""
    return ClipSpec.__pydantic_decorators__.model_validators[name].func


class Quote(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: float | str
    end: float | str
    caption: str = ""


class BatchRequest(BaseModel):
    """One source, many quotes; every other field applies to each clip."""

    model_config = ConfigDict(extra="allow")
    source: str
    # each checked on its own (a Quote): a bad one is left out and named, the others are queued
    quotes: list[Any] = Field(min_length=1, max_length=MAX_BATCH)
    callback_url: str | None = Field(default=None, max_length=2048)


class ClipAccepted(BaseModel):
    id: str
    status: str  # queued, started or finished: the vocabulary of GET /clips/{id}
    stage: str | None = None  # the detail: queued, waiting, fetching, rendering, uploading, finished
    status_url: str
    download_url: str
    link: str | None = None
    cached: bool = False
    warnings: list[str] = []  # what is rendered but worth saying (a caption too fast to read)


class ProfileAccepted(ClipAccepted):
    profile: str


class ClipsAccepted(BaseModel):
    clips: list[ProfileAccepted]


class ClipStatus(BaseModel):
    id: str
    status: str
    stage: str | None
    progress: int
    link: str | None
    error: str | None


class Frame(BaseModel):
    index: int
    time: float  # seconds in the source, to the millisecond


class PreviewAnswer(BaseModel):
    """An instant preview: a link to an MP4 of the source's own frames (playback starts at ``first_frame``),
    the captions as WebVTT, and the exact source frames it holds."""

    id: str
    link: str
    vtt: str | None
    mode: str  # "copy" (stream copy, no encode) or "encoded" (the source could not be copied)
    reason: str | None  # why it was encoded
    frame_rate: str
    first_frame: Frame
    last_frame: Frame
    width: int
    height: int
    duration: float
    cached: bool
    warnings: list[str] = []
