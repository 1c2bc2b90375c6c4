"""The progress protocol of a clip job: its stages, and where each starts on the 0–100 scale."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

from renderer.fragments import Piece


class Stage(StrEnum):
    QUEUED = "queued"
    WAITING = "waiting"  # for a format the site makes available later (its available_at)
    FETCHING = "fetching"
    RENDERING = "rendering"
    UPLOADING = "uploading"
    FINISHED = "finished"
    FAILED = "failed"


# Share of the overall progress at which each stage starts.
STAGE_START = {Stage.WAITING: 0, Stage.FETCHING: 0, Stage.RENDERING: 5, Stage.UPLOADING: 95, Stage.FINISHED: 100}

Reporter = Callable[[Stage, int], None]


class ClipStream(Protocol):
    """Where a render's fragmented copy goes while it renders (a relay to viewers, jobs/relay.py): each piece in order
    (``piece``, from a thread of the render), then ``finished`` once the render is checked and before it is stored,
    or ``failed`` saying why it ended without a clip."""

    def piece(self, piece: Piece) -> None: ...

    def finished(self) -> None: ...

    def failed(self, reason: str) -> None: ...
