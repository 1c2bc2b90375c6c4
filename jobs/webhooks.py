"""Webhooks: a POST to each ``callback_url`` when a clip finishes or fails, signed, retried, never to a
private address.

Signature header: ``X-Quoteclip-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from typing import Any

import urllib3
from redis import Redis
from rq import Queue, Retry
from rq.job import Job

from quoteclip import redis_keys
from quoteclip.errors import DeliveryFailed, QuoteclipError
from quoteclip.settings import Settings
from sources.safety import check_url, connection_pool, host_header

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Quoteclip-Signature"
CALLBACK_TTL = 2 * 24 * 3600
DELIVERY_RETRY = Retry(max=5, interval=[2, 10, 30, 120, 600])
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 10.0  # a receiver has this long to answer
USER_AGENT = "quoteclip-webhooks/0.1"


def callbacks_key(job_id: str) -> str:
    return redis_keys.callbacks(job_id)


def add_callback(connection: Redis, job_id: str, url: str) -> None:
    key = callbacks_key(job_id)
    connection.sadd(key, url)
    connection.expire(key, CALLBACK_TTL)


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
    return hmac.compare_digest(expected, parts.get("v1", ""))


def post(url: str, body: bytes, headers: dict[str, str], allowed_networks: tuple[str, ...]) -> int:
    """POST ``body`` to a receiver at a public address (checked after DNS, connected to the vetted address, no
    redirects followed, the answer's body never read); the HTTP status."""
    try:
        target = check_url(url, None, allowed_networks)
    except QuoteclipError as exc:
        raise DeliveryFailed(f"webhook receiver not allowed: {exc}") from None
    pool = connection_pool(target, urllib3.Timeout(connect=CONNECT_TIMEOUT, read=READ_TIMEOUT), maxsize=1)
    try:
        resp = pool.urlopen(
            "POST", target.path, body=body, redirect=False, retries=False, preload_content=False,
            headers={**headers, "Host": host_header(target), "User-Agent": USER_AGENT,
                     "Content-Length": str(len(body))},
        )  # fmt: skip
        resp.close()  # the status is the answer; a receiver's body is not read
    except urllib3.exceptions.HTTPError as exc:
        raise DeliveryFailed(f"webhook receiver {target.host} could not be reached ({type(exc).__name__})") from None
    finally:
        pool.close()
    return int(resp.status)


def deliver(url: str, payload: dict[str, Any]) -> int:
    """The rq task that POSTs one webhook; raises (and so is retried with backoff) unless the receiver says 2xx."""
    settings = Settings.from_env()
    body = json.dumps(payload, sort_keys=True).encode()
    headers = {"Content-Type": "application/json"}
    if settings.webhook_secret:
        headers[SIGNATURE_HEADER] = sign(body, settings.webhook_secret)
    status = post(url, body, headers, settings.allow_addresses)
    if not 200 <= status < 300:
        raise DeliveryFailed(f"webhook receiver {url} answered HTTP {status}")
    log.info("webhook delivered to %s", url)
    return status


def _send_all(job: Job, connection: Redis, payload: dict[str, Any]) -> None:
    urls = sorted(u.decode() if isinstance(u, bytes) else str(u) for u in connection.smembers(callbacks_key(job.id)))
    if not urls:
        return
    connection.delete(callbacks_key(job.id))
    queue = Queue(job.origin, connection=connection)
    for url in urls:
        queue.enqueue("jobs.webhooks.deliver", url, payload, retry=DELIVERY_RETRY, job_timeout=60, result_ttl=3600)


def on_success(job: Job, connection: Redis, result: Any, *args: Any, **kwargs: Any) -> None:
    link = result.get("link") if isinstance(result, dict) else None
    _send_all(job, connection, {"id": job.id, "status": "finished", "link": link, "error": None})


def on_failure(job: Job, connection: Redis, *exc_info: Any, **kwargs: Any) -> None:
    if job.should_retry:  # a transient failure that will be retried: not final yet
        return
    error = job.meta.get("error") or (str(exc_info[1]) if len(exc_info) > 1 else "failed")
    _send_all(job, connection, {"id": job.id, "status": "failed", "link": None, "error": error})
