"""Every name quoteclip keeps in Redis, in one place (rq's own keys, ``rq:…``, are rq's). Job ids are
``clip-<content key>``; the queues are ``rq:queue:<name>`` and ``rq:queue:<name>-bulk``."""

from __future__ import annotations

PREFIX = "quoteclip"

# Sorted set: job id → when it was (re)queued; removed when a worker starts it (see jobs.maintenance).
PENDING = f"{PREFIX}:pending"
# Metrics recorded by workers on any machine and exported by the API (see jobs.metrics).
METRICS = f"{PREFIX}:metrics"


# Prefix of the rate-limit counters (kept by the ``limits`` library, one per client and window).
RATE_LIMITS = f"{PREFIX}:rate"


def batch(batch_id: str) -> str:
    """List of the job ids of one batch, in quote order."""
    return f"{PREFIX}:batch:{batch_id}"


def batch_clips(batch_id: str) -> str:
    """What each clip of one batch is (its quote's number, profile, times, caption, source), as JSON, for the
    archive's manifest."""
    return f"{PREFIX}:batch:{batch_id}:clips"


def requests(job_id: str) -> str:
    """Integer: how many requests started or joined a clip job still under way (each ``DELETE`` withdraws one; the
    render is stopped once none is left, jobs/cancel.py)."""
    return f"{PREFIX}:requests:{job_id}"


def callbacks(job_id: str) -> str:
    """Set of callback URLs to POST when the job ends."""
    return f"{PREFIX}:callbacks:{job_id}"


def events(job_id: str) -> str:
    """Pub/sub channel told each time a job's stage or progress changes: status long-polls wake on it."""
    return f"{PREFIX}:events:{job_id}"


EVENTS = events("*")  # the pattern the API subscribes to


def stream(job_id: str) -> str:
    """Redis stream, in the relay's Redis (``QUOTECLIP_STREAM_REDIS_URL``): a rendering clip's fragmented copy, piece by
    piece, from its worker to the API (jobs/relay.py); it lives seconds past its writer's last sign of life, and the
    clip's length and a little more past its end."""
    return f"{PREFIX}:stream:{job_id}"


def stream_index(job_id: str) -> str:
    """Hash beside ``stream(job_id)``: each fragment's number → its entry, start and length (an HLS playlist's
    lines, without reading the fragments)."""
    return f"{PREFIX}:stream-index:{job_id}"


def api_wake(process: str) -> str:
    """Redis stream, in the relay's Redis, one an API process (``process``: its own random name) reads with its
    clips' streams and adds to when a clip starts waiting on a stream its read under way does not name
    (api/fanout.py ``Reader``); one entry at most, gone a minute after its last."""
    return f"{PREFIX}:api-wake:{process}"


def stream_wanted(job_id: str) -> str:
    """Set, in the relay's Redis, for a few seconds at a time (``jobs.relay.WANTED_MS``) by the API while a viewer
    waits for a rendering clip's stream (``jobs.relay.want``, called by ``begin``): its worker relays the clip's
    fragments only once it is set, and renders an unwatched clip as it renders one with streaming off."""
    return f"{PREFIX}:stream-wanted:{job_id}"


def job_id(key: str) -> str:
    return f"clip-{key}"


def webhook_queue(queue_name: str) -> str:
    """Where webhook deliveries wait, served by ``quoteclip worker --webhooks`` only (never by render workers)."""
    return f"{queue_name.removesuffix('-bulk')}-webhooks"


def bulk_queue(queue_name: str) -> str:
    """Bulk work (batches) waits behind on-demand clicks: workers listen to the main queue first."""
    return f"{queue_name}-bulk"


def member(job_id: str) -> str:
    """Set for a minute by the request that creates a clip's job waiting on its profiles' group job."""
    return f"{PREFIX}:member:{job_id}"


def extraction(key: str) -> str:
    """A page's extraction (sources.extraction), shared by the workers until its URLs expire."""
    return f"{PREFIX}:extraction:{key}"


def extraction_lock(key: str) -> str:
    """Held by the one job extracting a page while the others wait for its entry."""
    return f"{PREFIX}:extraction-lock:{key}"


LINK_REQUESTS = f"{METRICS}:link_requests"  # hash: "site key|variant|outcome" → requests of signed links
LINK_RENDERS = f"{METRICS}:link_renders"  # hash: site key id → renders its links started
LINK_RENDER_LIMITS = "link-renders"  # the rate limiter's namespace for renders started through links, per key

# Set of the names of the render workers that keep a status (and a lease) in Redis.
WORKERS = f"{PREFIX}:workers"
# Held for a third of a lease by the worker looking for jobs whose worker's lease lapsed (one look at a time).
RECLAIM_LOCK = f"{PREFIX}:reclaim-lock"


def worker(name: str) -> str:
    """Hash: a render worker's status (``state`` healthy or unhealthy, ``reason``, ``detail``, ``since``,
    ``host``, ``pid``, ``beat``) and its pause after a machine fault (``paused_until``, ``fault_reason``,
    ``fault_detail``). It expires a lease after the worker's last renewal: a worker without one is dead."""
    return f"{PREFIX}:worker:{name}"


def taken(name: str) -> str:
    """List: the job ids a render worker has taken from a queue and not yet started (each moved here from its queue
    by one LMOVE/BLMOVE, so a job whose taking's answer was lost is still somewhere). The worker removes an id once
    the job is started; the reconciler puts back the ids of a worker whose lease lapsed."""
    return f"{PREFIX}:taken:{name}"


# Set: the names of the render workers that have a ``taken`` list (the reconciler's index of them).
TAKERS = f"{PREFIX}:takers"


def piece_claim(key: str, index: int) -> str:
    """String: which worker renders piece ``index`` of clip ``key`` (a lease its holder renews; jobs/pieces.py)."""
    return f"{PREFIX}:piece:{key}:{index}:claim"


def piece_done(key: str, index: int) -> str:
    """String: piece ``index`` of clip ``key`` is in the object store (``pieces/<key>/<index>.mp4``)."""
    return f"{PREFIX}:piece:{key}:{index}:done"


def piece_failed(key: str) -> str:
    """String: why a piece of clip ``key`` failed for good (the clip fails with it)."""
    return f"{PREFIX}:piece:{key}:failed"


def piece_count(key: str) -> str:
    """String: how many pieces clip ``key``'s job offered (for removing them when the clip is canceled)."""
    return f"{PREFIX}:piece:{key}:count"
