"""The progress protocol of a clip job: its stages, and where each starts on the 0–100 scale; and what a render
hands to others (a stream of its fragments, the fleet that renders a long clip's pieces)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from renderer.fragments import Piece

if TYPE_CHECKING:  # (a stored clip's answer loads none of the renderer: tests/test_cli.py)
    from quoteclip.settings import Settings
    from quoteclip.spec import ClipSpec
    from renderer.probe import MediaInfo
    from renderer.render import RenderResult
    from renderer.split import SplitPlan
    from storage import Storage


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


@dataclass(frozen=True)
class Joined:
    """A clip rendered in pieces: the clip, and what its pieces cost where (for the log and the benchmark)."""

    result: RenderResult
    pieces: int
    here: int  # pieces this worker rendered
    piece_s: dict[int, float]  # ffmpeg seconds of each piece rendered here
    sound_s: float
    join_s: float


class Splitter(Protocol):
    """The workers a long clip's pieces are offered to (jobs/pieces.py ``Fleet``): whether a clip splits, and its
    render in pieces."""

    def splits(self, spec: ClipSpec, length: float, settings: Settings, info: MediaInfo) -> bool: ...

    def render(
        self,
        plan: SplitPlan,
        spec: ClipSpec,
        key: str,
        source: str,
        audio_source: str | None,
        workdir: Path,
        ffmpeg_bin: str,
        settings: Settings,
        storage: Storage,
        progress: Callable[[float], None] | None = None,
        stream: Callable[[Piece], None] | None = None,
    ) -> Joined: ...
