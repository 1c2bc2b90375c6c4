"""Request and answer bodies of the API (the OpenAPI schema is built from these)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from quoteclip.spec import PROFILES, ClipSpec, ProfileName

MAX_BATCH = 100


class ClipRequest(ClipSpec):
    """A clip spec, plus where to POST when it is done."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    callback_url: str | None = Field(default=None, max_length=2048)
    # several shapes of the quote from one decode, each its own clip (answered as {"clips": [...]})
    profiles: list[ProfileName] | None = Field(default=None, min_length=1, max_length=len(PROFILES))


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
