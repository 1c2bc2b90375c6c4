"""Webhooks: a POST to each ``callback_url`` when a clip finishes or fails, signed, retried, never to a
private address, delivered from their own queue by their own workers (``quoteclip worker --webhooks``), so a
slow receiver never holds a render. A delivery ends ``QUOTECLIP_WEBHOOK_TIMEOUT`` seconds after it starts, whatever
the receiver does, and a webhook worker makes several at once (``QUOTECLIP_WEBHOOK_CONCURRENCY``), so slow
receivers never hold a prompt one's delivery for long.

Signatures follow Standard Webhooks (``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<base64>``;
verify with the ``standardwebhooks`` library and the same secret). The older ``X-Quoteclip-Signature:
t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`` is sent too, for one more release.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import urllib3
from redis import Redis
from rq import Queue, Retry
from rq.executions import Execution
from rq.job import Job
from rq.timeouts import TimerDeathPenalty
from rq.worker import BaseWorker, WorkerStatus
from standardwebhooks.webhooks import Webhook

from quoteclip import redis_keys
from quoteclip.errors import BadInput, DeliveryFailed, QuoteclipError
from quoteclip.settings import Settings
from sources.safety import check_url, connection_to, host_header

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Quoteclip-Signature"  # the older header, kept for one release
MAX_CALLBACKS = 5  # callback URLs one clip job may carry
CALLBACK_TTL = 2 * 24 * 3600
DELIVERY_RETRY = Retry(max=5, interval=[2, 10, 30, 120, 600])
CONNECT_TIMEOUT = 5.0  # of the delivery's QUOTECLIP_WEBHOOK_TIMEOUT, at most this long to connect
JOB_TIMEOUT_SLACK = 20  # a delivery job's rq timeout: the delivery's deadline and this (a backstop, never reached)
USER_AGENT = "quoteclip-webhooks/0.1"


def callbacks_key(job_id: str) -> str:
    return redis_keys.callbacks(job_id)


def add_callback(connection: Redis, job_id: str, url: str) -> None:
    """Remember ``url`` for the job; at most MAX_CALLBACKS distinct URLs a job (each costs a delivery)."""
    key = callbacks_key(job_id)
    if not connection.sismember(key, url) and int(connection.scard(key)) >= MAX_CALLBACKS:
        raise BadInput(f"callback_url: this clip already has {MAX_CALLBACKS} callbacks, the most one clip takes")
    connection.sadd(key, url)
    connection.expire(key, CALLBACK_TTL)


def standard_webhook(secret: str) -> Webhook:
    """The Standard Webhooks signer for ``QUOTECLIP_WEBHOOK_SECRET`` (``whsec_<base64>``, or any other text,
    used as its bytes)."""
    return Webhook(secret if secret.startswith("whsec_") else secret.encode())


def signed_headers(body: bytes, secret: str, message_id: str, timestamp: int | None = None) -> dict[str, str]:
    ts = int(time.time()) if timestamp is None else timestamp
    when = datetime.fromtimestamp(ts, tz=UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": standard_webhook(secret).sign(message_id, when, body.decode()),
        SIGNATURE_HEADER: sign(body, secret, ts),
    }


def sign(body: bytes, secret: str, timestamp: int | None = None) -> str:
    ts = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={ts},v1={mac}"


def verify(body: bytes, header: str, secret: str, tolerance: int = 300) -> bool:
    """What a receiver does: check the HMAC in constant time and that the timestamp is recent."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        ts = int(parts["t"])
    except (ValueError, KeyError):
        return False
    if abs(time.time() - ts) > tolerance:
        return False
    expected = sign(body, secret, ts).split("v1=", 1)[1]
    return hmac.compare_digest(expected.encode(), parts.get("v1", "").encode("utf-8", "replace"))


class _Deadline:
    """Ends a connection's exchange ``seconds`` after it starts: a timer shuts its socket down, which wakes the
    read waiting on it (a receiver dripping its headers a byte at a time never lets a read time out)."""

    def __init__(self, conn: Any, seconds: float) -> None:
        self.conn = conn
        self.ends = time.monotonic() + seconds
        self.expired = False
        self.timer = threading.Timer(seconds, self._cut)
        self.timer.daemon = True
        self.timer.start()

    def _cut(self) -> None:
        self.expired = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # (the plain socket's: under TLS too)

    def left(self) -> float:
        if self.expired:
            raise TimeoutError("deadline")
        return max(0.001, self.ends - time.monotonic())

    def cancel(self) -> None:
        self.timer.cancel()


def post(url: str, body: bytes, headers: dict[str, str], allowed_networks: tuple[str, ...], deadline: float) -> int:
    """POST ``body`` to a receiver at a public address (checked after DNS, connected to the vetted address, no
    redirects followed, the answer's body never read); the HTTP status. Connecting, sending and reading the
    answer's status line and headers end ``deadline`` seconds after the connection is begun, whatever the receiver
    does."""
    try:
        target = check_url(url, None, allowed_networks)
    except QuoteclipError as exc:
        raise DeliveryFailed(f"webhook receiver not allowed: {exc}") from None
    conn = connection_to(target, min(CONNECT_TIMEOUT, deadline))  # held here, so that the deadline can cut it
    limit = _Deadline(conn, deadline)
    try:
        conn.request(
            "POST",
            target.path,
            body=body,
            preload_content=False,
            headers={
                **headers,
                "Host": host_header(target),
                "User-Agent": USER_AGENT,
                "Content-Length": str(len(body)),
            },
        )
        conn.timeout = limit.left()  # a silent receiver's read times out at the deadline too
        resp = conn.getresponse()
        status = int(resp.status)
        resp.close()  # the status is the answer; a receiver's body is not read
        limit.left()  # headers cut short by the deadline read as ended (http.client): not an answer
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
        reason = f"no answer within {deadline:g} s" if limit.expired else type(exc).__name__
        raise DeliveryFailed(f"webhook receiver {target.host} could not be reached ({reason})") from None
    finally:
        limit.cancel()
        conn.close()
    return status


def deliver(url: str, payload: dict[str, Any]) -> int:
    """The rq task that POSTs one webhook; raises (and so is retried with backoff) unless the receiver says 2xx."""
    settings = Settings.from_env()
    body = json.dumps(payload, sort_keys=True).encode()
    headers = {"Content-Type": "application/json"}
    if settings.webhook_secret:
        message_id = f"msg_{payload.get('id')}_{payload.get('status')}"  # the same across retries
        headers.update(signed_headers(body, settings.webhook_secret, message_id))
    status = post(url, body, headers, settings.allow_addresses, settings.webhook_timeout)
    if not 200 <= status < 300:
        raise DeliveryFailed(f"webhook receiver {url} answered HTTP {status}")
    log.info("webhook delivered to %s", url)
    return status


def _send_all(job: Job, connection: Redis, payload: dict[str, Any]) -> None:
    urls = sorted(u.decode() if isinstance(u, bytes) else str(u) for u in connection.smembers(callbacks_key(job.id)))
    if not urls:
        return
    connection.delete(callbacks_key(job.id))
    queue_deliveries(connection, job.origin, urls, payload)


def queue_deliveries(connection: Redis, queue_name: str, urls: list[str], payload: dict[str, Any]) -> None:
    """One delivery job a receiver, on the webhook queue of ``queue_name`` (served by webhook workers only)."""
    queue = Queue(redis_keys.webhook_queue(queue_name), connection=connection)
    timeout = int(Settings.from_env().webhook_timeout) + JOB_TIMEOUT_SLACK
    for url in urls:
        queue.enqueue("jobs.webhooks.deliver", url, payload, retry=DELIVERY_RETRY, job_timeout=timeout, result_ttl=3600)


def on_success(job: Job, connection: Redis, result: Any, *args: Any, **kwargs: Any) -> None:
    link = result.get("link") if isinstance(result, dict) else None
    if not (isinstance(link, str) and link.startswith(("https://", "http://"))):
        link = None  # a local-folder store's file:// link names a server path: receivers use download_url
    _send_all(
        job,
        connection,
        {"id": job.id, "status": "finished", "link": link, "error": None, "download_url": f"/clips/{job.id}/download"},
    )


def on_failure(job: Job, connection: Redis, *exc_info: Any, **kwargs: Any) -> None:
    if job.should_retry:  # a transient failure that will be retried: not final yet
        return
    error = job.meta.get("error") or (str(exc_info[1]) if len(exc_info) > 1 else "failed")
    _send_all(
        job,
        connection,
        {"id": job.id, "status": "failed", "link": None, "error": error, "download_url": f"/clips/{job.id}/download"},
    )


class ConcurrentDeliveries(BaseWorker):
    """What makes an rq worker a webhook worker: it runs its jobs side by side, each in a thread of its own process,
    at most ``QUOTECLIP_WEBHOOK_CONCURRENCY`` at once, instead of one forked work-horse after another. A receiver
    slow to answer holds one thread (for the delivery's deadline at most), never the deliveries queued behind it.
    The worker takes a job from the queue only when a thread is free, and waits for the running ones before it
    leaves (a warm shutdown, the end of a burst)."""

    death_penalty_class = TimerDeathPenalty  # a job's rq timeout in its own thread (SIGALRM reaches the main one only)
    _deliveries: ThreadPoolExecutor | None = None
    _free: threading.BoundedSemaphore | None = None

    def execute_job(self, job: Job, queue: Queue) -> None:
        if self._deliveries is None or self._free is None:
            concurrency = Settings.from_env().webhook_concurrency
            self._deliveries = ThreadPoolExecutor(concurrency, thread_name_prefix="delivery")
            self._free = threading.BoundedSemaphore(concurrency)
        self.set_state(WorkerStatus.BUSY)  # a SIGTERM meanwhile stops the worker after this job, not before it
        self._free.acquire()
        try:
            execution = self.prepare_execution(job)
            self._deliveries.submit(self._perform, job, queue, execution)
        except BaseException:
            self._free.release()
            raise

    def _perform(self, job: Job, queue: Queue, execution: Execution) -> None:
        try:
            self.perform_job(job, queue, execution)  # rq's own bookkeeping: result, retry with backoff, failure
        except Exception:
            log.exception("webhook delivery %s could not be recorded", job.id)
        finally:
            assert self._free is not None
            self._free.release()

    def teardown(self) -> None:
        if self._deliveries is not None:
            self._deliveries.shutdown(wait=True)  # the deliveries under way end within their deadline
        super().teardown()
