"""What the API's logs may carry: no credential from a URL (a key, a token, a signature, a signed link's token)."""

from __future__ import annotations

import hashlib

from api.auth import redact


def test_query_credentials_are_redacted_by_their_decoded_name() -> None:
    line = '"GET /clips/x?Authorization=abc&k%65y=def&sig=ghi&api_key=jkl&page=2&X-Amz-Signature=mno HTTP/1.1" 200'
    assert redact(line) == (
        '"GET /clips/x?Authorization=[redacted]&k%65y=[redacted]&sig=[redacted]&api_key=[redacted]&page=2'
        '&X-Amz-Signature=[redacted] HTTP/1.1" 200'
    )


def test_a_signed_links_token_is_logged_as_a_short_hash_with_its_site() -> None:
    token = "eyJzIjoiaHR0cHM6Ly9leGFtcGxlLmNvbS9lcC5tcDQifQ.c2lnbmF0dXJl"
    digest = hashlib.sha256(token.encode()).hexdigest()[:12]
    assert (
        redact(f'"GET /l/starzero/{token}.mp4 HTTP/1.1" 200') == f'"GET /l/starzero/[link {digest}].mp4 HTTP/1.1" 200'
    )
    assert redact(f"/l/starzero/{token}.m3u8/3.m4s?x=1") == f"/l/starzero/[link {digest}].m3u8/3.m4s?x=1"
    assert token not in redact(f"HEAD /l/open/{token}")
    assert redact("GET /clips/abc/download HTTP/1.1") == "GET /clips/abc/download HTTP/1.1"  # nothing secret
