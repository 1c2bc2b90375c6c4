"""A long clip rendered in pieces by several workers (``renderer/split.py`` makes and joins them).

The clip's own job plans the pieces and offers all but the first to the fleet as piece jobs on its queue; then it
renders pieces itself (the first one first), and the clip's whole sound, until none is left to take, fetches the
ones other workers stored, joins them and stores the one clip under the clip's key, as a one-piece render does.

Who renders a piece is decided by a claim in Redis (``redis_keys.piece_claim``): a lease its holder renews every
``RENEW`` seconds and that lapses ``LEASE`` seconds after a holder dies. A piece job whose piece is claimed or done
ends at once; the clip's job takes any piece whose claim lapsed, so a worker killed during a piece costs that
piece. A piece rendered elsewhere waits in the object store under ``pieces/<clip key>/`` until the join; the
clip's job removes the pieces and the markers once the clip is stored, and when it fails. A piece that fails for
good (a bad source frame, the source gone) marks the clip failed with its reason (``redis_keys.piece_failed``)."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue, get_current_job

from quoteclip import redis_keys
from quoteclip.errors import QuoteclipError, RenderFailed
from quoteclip.settings import Settings
from quoteclip.spec import ClipSpec, build_spec
from renderer.fragments import Piece as Fragment
from renderer.probe import MediaInfo
from renderer.split import (
    Piece,
    SplitPlan,
    join_pieces,
    plan_split,
    render_piece,
    render_sound,
    stream_piece,
    streams_live,
    why_whole,
)
from storage import Storage, open_storage

from .pipeline.stages import Joined

log = logging.getLogger(__name__)

LEASE = 20.0  # seconds a piece's claim lives without its holder's renewal
RENEW = 5.0  # seconds between renewals
MARKER_TTL = 6 * 3600  # seconds a piece's markers outlive a clip's job that never cleaned up
FAILED = "the clip's job ended without its pieces joined"
WAIT_STEP = 0.2  # seconds between looks at the pieces other workers render

# renew the claim only while it is still ours; release it only if it is
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


@dataclass(frozen=True)
class Fleet:
    """The workers a clip's job can offer pieces to: its Redis and its queue (the pipeline's ``Splitter``)."""

    connection: Redis
    queue: str

    def splits(self, spec: ClipSpec, length: float, settings: Settings, info: MediaInfo) -> bool:
        return splits(spec, length, settings, info)

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
        stream: Callable[[Fragment], None] | None = None,
    ) -> Joined:
        return render_in_pieces(
            plan, spec, key, source, audio_source, workdir, ffmpeg_bin, settings, storage, self, progress, stream
        )


def current_fleet() -> Fleet | None:
    """The fleet of the job this worker runs (None outside a queued job: the CLI renders whole)."""
    job = get_current_job()
    if job is None or not job.origin:
        return None
    return Fleet(job.connection, job.origin)


def splits(spec: ClipSpec, length: float, settings: Settings, info: MediaInfo) -> bool:
    """Whether ``spec``'s clip (``length`` seconds) renders in pieces."""
    if not settings.split_seconds or length <= settings.split_seconds or length <= settings.piece_seconds * 1.5:
        return False
    why = why_whole(spec, info)
    if why is not None:
        log.info("a %.1f s clip renders whole: %s", length, why)
        return False
    return True


def piece_job_id(key: str, index: int) -> str:
    return f"piece-{key}-{index}"


def piece_name(key: str, index: int, suffix: str = ".mp4") -> str:
    return f"{key}/{index}{suffix}"


class Claims:
    """The pieces of one clip this process holds, their leases renewed by a thread until ``close``."""

    def __init__(self, connection: Redis, key: str) -> None:
        self.connection, self.key = connection, key
        self.token = secrets.token_hex(8)
        self.held: set[int] = set()
        self._renew = connection.register_script(_RENEW)
        self._release = connection.register_script(_RELEASE)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renewing, name="piece-leases", daemon=True)
        self._thread.start()

    def take(self, index: int) -> bool:
        if self.connection.set(redis_keys.piece_claim(self.key, index), self.token, nx=True, px=int(LEASE * 1000)):
            self.held.add(index)
            return True
        return False

    def release(self, index: int) -> None:
        self.held.discard(index)
        self._release(keys=[redis_keys.piece_claim(self.key, index)], args=[self.token])

    def _renewing(self) -> None:
        while not self._stop.wait(RENEW):
            for index in list(self.held):
                try:
                    self._renew(keys=[redis_keys.piece_claim(self.key, index)], args=[self.token, int(LEASE * 1000)])
                except Exception as exc:  # noqa: BLE001  (a missed renewal is retried; the lease has room)
                    log.info("piece %d's lease not renewed: %s", index, exc)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for index in list(self.held):
            try:
                self.release(index)
            except Exception as exc:  # noqa: BLE001  (the lease lapses by itself)
                log.info("piece %d's claim not released: %s", index, exc)


@contextmanager
def claims(connection: Redis, key: str) -> Iterator[Claims]:
    held = Claims(connection, key)
    try:
        yield held
    finally:
        held.close()


def render_in_pieces(
    plan: SplitPlan,
    spec: ClipSpec,
    key: str,
    source: str,
    audio_source: str | None,
    workdir: Path,
    ffmpeg_bin: str,
    settings: Settings,
    storage: Storage,
    fleet: Fleet,
    progress: Callable[[float], None] | None = None,
    stream: Callable[[Fragment], None] | None = None,
) -> Joined:
    """The clip of ``plan`` rendered in pieces with the fleet's help, joined in ``workdir``: see the module. ``spec``
    is the clip's spec as asked (``plan.spec`` has its brand files as this machine's paths). ``stream``: handed the
    clip's stream, piece after piece in the clip's order as each is here and the sound is (``Streamed``)."""
    connection = fleet.connection
    pieces = plan.pieces
    files: dict[int, Path] = {}
    streamed = Streamed(plan, ffmpeg_bin, stream, settings.render_timeout(settings.piece_seconds))
    poster: Path | None = None
    piece_s: dict[int, float] = {}
    timeout = settings.render_timeout(settings.piece_seconds)
    joined = False
    try:
        connection.delete(redis_keys.piece_failed(key))  # (a canceled earlier run's: this run starts afresh)
        connection.set(redis_keys.piece_count(key), len(pieces), ex=MARKER_TTL)
        _offer(spec, plan, key, settings, fleet)
        with claims(connection, key) as held:
            sound_s = 0.0
            sound: Path | None = None
            while len(files) < len(pieces):
                _check_failed(connection, key)
                streamed.on(files, sound)
                took = False
                for piece in pieces:
                    if piece.index in files:
                        continue
                    if connection.exists(redis_keys.piece_done(key, piece.index)):
                        files[piece.index], still = _fetch(storage, key, piece.index, workdir)
                        poster = poster or still
                        continue
                    if held.take(piece.index):
                        out = workdir / f"piece-{piece.index}.mp4"
                        live = streamed.live(piece)
                        _, still, piece_s[piece.index] = render_piece(
                            plan, piece, source, out, ffmpeg_bin, timeout, settings.max_frame_pixels, live, audio_source
                        )
                        streamed.went_live(piece, live)
                        files[piece.index], poster = out, poster or still
                        took = True
                        if progress is not None:
                            progress(len(files) / len(pieces))
                        break  # (look again at what the others finished before taking the next)
                if sound is None and (0 in files or not took):  # the sound after the first piece
                    began = time.perf_counter()
                    sound = render_sound(plan, source, workdir / "sound.m4a", ffmpeg_bin, timeout, audio_source)
                    sound_s = round(time.perf_counter() - began, 3)
                    continue
                if not took and len(files) < len(pieces):
                    time.sleep(WAIT_STEP)
            assert sound is not None
            streamed.on(files, sound)
            ordered = [files[p.index] for p in pieces]
            began = time.perf_counter()
            result = join_pieces(plan, ordered, sound, poster, workdir, ffmpeg_bin, timeout)
            join_s = round(time.perf_counter() - began, 3)
            joined = True
    finally:
        if not joined:  # set before the pieces are removed: a piece job still rendering on another machine drops
            connection.set(
                redis_keys.piece_failed(key), FAILED, nx=True, ex=MARKER_TTL
            )  # its piece (a new run clears it)
        clean_pieces(connection, storage, key, len(pieces))
        if joined:
            connection.delete(redis_keys.piece_failed(key))
    log.info(
        "clip %s rendered in %d pieces (%d here, %s s of ffmpeg), sound %.2f s, join %.2f s",
        key,
        len(pieces),
        len(piece_s),
        round(sum(piece_s.values()), 2),
        sound_s,
        join_s,
    )
    return Joined(result, len(pieces), len(piece_s), piece_s, sound_s, join_s)


class Streamed:
    """A split clip's stream, in the clip's order. The first piece (the clip's job takes it) streams live, as a
    one-piece render does: its fragments, with its span's sound, relayed while it renders (``renderer/split.py``
    ``render_piece``). Every other piece, once it and the clip's sound are here, is copied into the stream's
    fragments on the clip's clock (``stream_piece``), so a viewer of a clip rendered in pieces plays it from its
    first frame while the rest render. A stream that fails stops (said once); the clip goes on, as a render's
    does. A levelled clip's pieces do not stream live (``streams_live``): its stream waits for the first piece and
    the clip's sound."""

    def __init__(
        self, plan: SplitPlan, ffmpeg_bin: str, sink: Callable[[Fragment], None] | None, timeout: float
    ) -> None:
        self.plan, self.ffmpeg_bin, self.sink, self.timeout = plan, ffmpeg_bin, sink, timeout
        self.next = 0  # the next piece to stream, by its place in the plan

    def live(self, piece: Piece) -> Callable[[Fragment], None] | None:
        """Where ``piece``'s stream goes while it renders here: the stream, for the first piece before anything was
        streamed (None: it is streamed from its file later, or not at all)."""
        first = self.next == 0 and piece.index == self.plan.pieces[0].index
        return self.sink if first and streams_live(self.plan) else None

    def went_live(self, piece: Piece, live: Callable[[Fragment], None] | None) -> None:
        """``piece`` rendered with ``live`` as its stream: the next piece is the one after it."""
        if live is not None:
            self.next += 1

    def on(self, files: dict[int, Path], sound: Path | None) -> None:
        """Stream every piece that is next in order and here (nothing before the sound is)."""
        pieces = self.plan.pieces
        while self.sink is not None and sound is not None and self.next < len(pieces):
            piece = pieces[self.next]
            if piece.index not in files:
                return
            try:
                stream_piece(self.plan, piece, files[piece.index], sound, self.ffmpeg_bin, self.sink, self.timeout)
            except Exception as exc:  # noqa: BLE001  (the stream stops; the pieces, and the stored clip, go on)
                log.warning("the clip's stream stopped at piece %d: %s", piece.index, f"{exc}".splitlines()[0])
                self.sink = None
                return
            self.next += 1


def _offer(spec: ClipSpec, plan: SplitPlan, key: str, settings: Settings, fleet: Fleet) -> None:
    """A piece job for every piece but the first (the clip's job starts with it), on the clip's own queue; joined,
    never doubled, when they are there already (a clip's job run again after its worker died)."""
    from rq.exceptions import DuplicateJobError

    from .queue import FAILURE_TTL

    queue = Queue(fleet.queue, connection=fleet.connection)
    data = spec.model_dump(mode="json")
    for piece in plan.pieces[1:]:
        job_id = piece_job_id(key, piece.index)
        if _queued(fleet.connection, job_id):
            continue
        try:
            queue.enqueue(
                "jobs.pieces.render_piece_job",
                data,
                key,
                piece.index,
                settings.piece_seconds,
                job_id=job_id,
                unique=True,
                job_timeout=int(settings.render_timeout(settings.piece_seconds) + 120),
                result_ttl=60,
                failure_ttl=FAILURE_TTL,
                description=f"piece {piece.index} of clip {key}",
            )
        except DuplicateJobError:
            pass  # (offered by another run of the clip's job a moment ago)


def _queued(connection: Redis, job_id: str) -> bool:
    from rq.exceptions import NoSuchJobError
    from rq.job import Job

    try:
        job = Job.fetch(job_id, connection=connection)
    except NoSuchJobError:
        return False
    if job.get_status(refresh=False) in ("queued", "started"):
        return True
    job.delete()  # an old run's job: replaced
    return False


def _check_failed(connection: Redis, key: str) -> None:
    why = connection.get(redis_keys.piece_failed(key))
    if why is not None:
        raise RenderFailed((why.decode() if isinstance(why, bytes) else str(why))[:300])


def _fetch(storage: Storage, key: str, index: int, workdir: Path) -> tuple[Path, Path | None]:
    """A piece another worker stored (and the clip's poster, with the first piece)."""
    out = workdir / f"piece-{index}.mp4"
    if not storage.get_piece(piece_name(key, index), out):
        raise RenderFailed(f"piece {index} of the clip was marked done but is not in the object store")
    still = None
    if index == 0:
        still = workdir / "poster.jpg"
        if not storage.get_piece(piece_name(key, 0, ".jpg"), still):
            still = None
    return out, still


def clean_pieces(connection: Redis, storage: Storage, key: str, count: int | None = None) -> int:
    """Clip ``key``'s pieces gone: its stored pieces, its markers, and its piece jobs still waiting in the queue
    (``count``: how many pieces; else as many as its job offered). How many stored pieces were removed."""
    from rq.exceptions import NoSuchJobError
    from rq.job import Job, JobStatus

    if count is None:
        offered = connection.get(redis_keys.piece_count(key))
        count = int(offered) if offered is not None else 0
    for index in range(1, count):  # (a piece job a worker took ends at once: its clip is stored or failed)
        try:
            job = Job.fetch(piece_job_id(key, index), connection=connection)
            if job.get_status(refresh=False) == JobStatus.QUEUED:
                job.delete()  # out of the queue too
        except NoSuchJobError:
            pass
        except Exception as exc:  # noqa: BLE001
            log.info("piece job %d not removed from the queue: %s", index, exc)
    names = [redis_keys.piece_done(key, i) for i in range(count)] + [redis_keys.piece_count(key)]
    try:
        removed = storage.delete_pieces(f"{key}/")
        connection.delete(*names)
    except Exception as exc:  # noqa: BLE001  (the markers expire; the bucket's lifecycle rule takes stray pieces)
        log.warning("the pieces of clip %s were not all removed: %s", key, exc)
        return 0
    if removed:
        log.info("removed %d stored pieces of clip %s", removed, key)
    return removed


def render_piece_job(spec_data: dict[str, Any], key: str, index: int, piece_seconds: float) -> dict[str, object]:
    """A piece job: render piece ``index`` of clip ``key`` and store it, unless it is claimed, done, or its clip is
    stored or failed (then end at once)."""
    settings = Settings.from_env().for_queue()
    job = get_current_job()
    assert job is not None, "a piece job runs on a worker"
    connection = job.connection
    from .maintenance import PENDING

    connection.zrem(PENDING, job.id)
    storage = open_storage(settings)
    if (
        connection.exists(redis_keys.piece_done(key, index), redis_keys.piece_failed(key))
        or storage.stat(key) is not None
    ):
        log.info("piece %d of clip %s: done, or its clip is stored or failed", index, key)
        return {"piece": index, "rendered": False}
    with claims(connection, key) as held:
        if not held.take(index):
            log.info("piece %d of clip %s: taken by another worker", index, key)
            return {"piece": index, "rendered": False}
        try:
            seconds = _render_stored_piece(spec_data, key, index, piece_seconds, settings, storage)
        except QuoteclipError as exc:
            if exc.permanent:
                said = f"piece {index}: {exc.kind}: {exc}".splitlines()[0]
                connection.set(redis_keys.piece_failed(key), said, ex=MARKER_TTL)
            raise
        connection.set(redis_keys.piece_done(key, index), "1", ex=MARKER_TTL)
        if connection.exists(redis_keys.piece_failed(key)):  # the clip failed or was canceled meanwhile
            clean_pieces(connection, storage, key)
            connection.delete(redis_keys.piece_done(key, index))
            return {"piece": index, "rendered": False}
    return {"piece": index, "rendered": True, "ffmpeg_s": seconds}


def _render_stored_piece(
    spec_data: dict[str, Any], key: str, index: int, piece_seconds: float, settings: Settings, storage: Storage
) -> float:
    """Open the source (only the piece's span), plan the clip as its job did, render the piece and store it."""
    from renderer.ffmpeg import ffmpeg_binary
    from sources import resolve_source
    from sources.opener import open_source

    from .pipeline.assets import localize
    from .pipeline.steps import probed, workspace
    from .pipeline.tempdirs import clip_bytes

    spec = build_spec(spec_data, max_seconds=settings.max_clip_seconds)
    binary = ffmpeg_binary(settings.ffmpeg_binary)
    with workspace(settings, clip_bytes(piece_seconds, 1)) as tmp:
        assets = tmp / "assets"
        assets.mkdir()
        drawn = localize(spec, settings, storage, assets)
        span = _span(spec, index, piece_seconds)
        source = resolve_source(spec.source, allow_local=settings.allow_local_sources is True)
        with open_source(source, settings, tmp, binary, False, None, span) as opened:
            info = probed(opened, spec.source, settings, False)
            plan = plan_split(drawn, opened.video, info, tmp, piece_seconds, opened.probe_video)
            piece = plan.pieces[index]
            out = tmp / f"piece-{index}.mp4"
            _, still, seconds = render_piece(
                plan,
                piece,
                opened.video,
                out,
                binary,
                settings.render_timeout(piece_seconds),
                settings.max_frame_pixels,
            )
        storage.put_piece(piece_name(key, index), out)
        if still is not None:
            storage.put_piece(piece_name(key, index, ".jpg"), still)
    log.info("stored piece %d of clip %s (%.2f s of ffmpeg)", index, key, seconds)
    return seconds


def _span(spec: ClipSpec, index: int, piece_seconds: float) -> tuple[float, float]:
    """About the part of the source piece ``index`` reads (the opener fetches only that, with its own margins)."""
    begins = spec.cut_start + max(0.0, index * piece_seconds - piece_seconds)
    return begins, min(spec.cut_end, spec.cut_start + (index + 2) * piece_seconds)
