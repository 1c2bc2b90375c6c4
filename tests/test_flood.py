"""A flood of connections that send half a request's headers, or nothing, against ``quoteclip serve`` (api/server.py:
the header deadline and the connection cap), measured from outside as ``python -m testkit.flood`` measures it, at a
size CI runs in about ten seconds."""

from __future__ import annotations

import pytest

from testkit.flood import FULL, Result, run

HALF, SILENT = 300, 15  # connections that send half a header, and that send nothing
CAP = 100  # QUOTECLIP_MAX_CONNECTIONS
HEADER_TIMEOUT = 3.0  # QUOTECLIP_HEADER_TIMEOUT, seconds
AT_ONCE = 1.5  # seconds from its connect a refused connection has its 503 within (above one SYN retry, 1 s, for a
# burst past the listen backlog)
GRACE = 1.5  # seconds past the header deadline the API has closed every connection it held within
CHECKED = 1.0  # seconds a health check during the flood is answered within


def flooded(redis_url: str, **settings: str) -> Result:
    result = run(HALF, CAP, HEADER_TIMEOUT, silent=SILENT, redis_url=redis_url, settings=settings)
    assert not isinstance(result, str), result
    return result


@pytest.mark.integration
def test_a_flood_of_half_sent_headers_is_refused_past_the_cap_and_closed_at_the_header_deadline(redis_url) -> None:
    """315 connections at once (300 half a header, 15 nothing) against a cap of 100 and a deadline of 3 s: the
    API holds at most 100 and answers the others 503 at once; it closes every one it held within the deadline and
    1.5 s, and holds none of them after; a health check during the flood is answered at once, 200 or the cap's
    503 (the cap refuses a connection before anything of it is read, so a health check is refused like the flood
    until the deadline frees the slots), and 200 once the flood is closed."""
    r = flooded(redis_url)
    total = HALF + SILENT
    held = [e for e in r.ended if e.how != FULL]
    refused = r.of(FULL)
    assert CAP - 2 <= len(held) <= CAP, len(held)  # (the API's own count may lag one closed health check)
    assert len(refused) == total - len(held)
    assert max(e.at - e.began for e in refused) < AT_ONCE, "a connection past the cap waited for its 503"
    assert {e.how for e in held} == {"closed"}, "a held connection was not closed by the API, or was answered"
    closed = [e.at - e.began for e in held]
    assert min(closed) >= HEADER_TIMEOUT - 0.05, "a connection was closed before its header deadline"
    assert max(closed) < HEADER_TIMEOUT + GRACE, f"the last held connection was closed {max(closed):.2f} s in"
    before, connected, after = (found for _, found in r.samples)
    assert connected["viewers"] >= CAP - 2
    assert after["viewers"] == 0 and after["fds"] <= before["fds"] + 2, (before, after)
    assert r.before and {c.status for c in r.before} == {"200"}
    assert r.during, "no health check was asked while the flood was held"
    assert {c.status for c in r.during + r.closing} <= {"200", FULL}, [c.status for c in r.during + r.closing]
    assert max(c.seconds for c in r.during + r.closing) < CHECKED
    assert r.after and {c.status for c in r.after} == {"200"}
