"""A flood of connections that send half a request's headers, or nothing, against ``quoteclip serve`` (api/server.py:
the header deadline and the connection cap), measured from outside as ``python -m testkit.flood`` measures it, at a
size CI runs in about ten seconds."""

from __future__ import annotations

import pytest

from testkit.flood import FULL, Result, run

HALF, SILENT = 300, 15  # connections that send half a header, and that send nothing
CAP = 100  # QUOTECLIP_MAX_CONNECTIONS
HEADER_TIMEOUT = 3.0  # QUOTECLIP_HEADER_TIMEOUT, seconds
GRACE = 1.5  # seconds past the header deadline the API has closed every connection it held within
CHECKED = 1.0  # seconds a health check during the flood is answered within


def flooded(redis_url: str, **settings: str) -> Result:
    result = run(HALF, CAP, HEADER_TIMEOUT, silent=SILENT, redis_url=redis_url, settings=settings)
    assert not isinstance(result, str), result
    return result


@pytest.mark.integration
def test_a_flood_of_half_sent_headers_makes_room_for_newcomers_and_is_closed_at_the_header_deadline(
    redis_url,
) -> None:
    """315 connections at once (300 half a header, 15 nothing) against a cap of 100 and a deadline of 3 s: the
    API holds at most 100, each newcomer past the cap taking the place of the one that has waited longest for its
    headers (closed at once), so none is answered 503; it closes every one it held within the deadline and 1.5 s,
    and holds none of them after; a health check during the flood is answered 200 at once (it takes a flood
    connection's place), and 200 once the flood is closed."""
    r = flooded(redis_url)
    total = HALF + SILENT
    assert not r.of(FULL), "a connection was refused while others waited for their headers"
    closed = r.of("closed")
    assert len(closed) == total, {e.how for e in r.ended}
    evicted = [e for e in closed if e.at - e.began < HEADER_TIMEOUT - 0.05]
    held = [e for e in closed if e.at - e.began >= HEADER_TIMEOUT - 0.05]
    assert CAP - 2 - len(r.during) <= len(held) <= CAP, len(held)  # (each health check took a place)
    assert len(evicted) == total - len(held)  # (each closed as a newer connection came)
    assert max(e.at - e.began for e in held) < HEADER_TIMEOUT + GRACE, "a held connection outlived its deadline"
    before, connected, after = (found for _, found in r.samples)
    assert CAP - 2 <= connected["viewers"] <= CAP
    assert after["viewers"] == 0 and after["fds"] <= before["fds"] + 2, (before, after)
    assert r.before and {c.status for c in r.before} == {"200"}
    assert r.during, "no health check was asked while the flood was held"
    assert {c.status for c in r.during + r.closing} == {"200"}, [c.status for c in r.during + r.closing]
    assert max(c.seconds for c in r.during + r.closing) < CHECKED
    assert r.after and {c.status for c in r.after} == {"200"}
