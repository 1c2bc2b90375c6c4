"""What a source URL names, what reading a page may cost, and which addresses are private.

- A host that does not resolve and one that resolves to a refused address get one answer; the address checks
  refuse every special range and translated form.
- The page yt-dlp reads is the one the clip key names: every YouTube form the identity accepts names, to yt-dlp's
  own YouTube matcher, the video the identity names; forms it would read as another video are refused; yt-dlp is
  given the URL rebuilt from the identity (a user's #fragment, which yt-dlp reads as smuggled options, is dropped).
- The egress proxy answers only its own extraction: a request without its credential gets 407 and reaches nothing.
- A compressed page that inflates past QUOTECLIP_PAGE_MAX_MB fails with its reason, and the process's memory stays
  near its size (measured, in an extraction's own process and in a running API).
- A server that drips (its headers or its body) or never ends is cut at QUOTECLIP_PAGE_STALL, QUOTECLIP_PAGE_MIN_RATE
  or QUOTECLIP_PAGE_TIMEOUT, in plain requests and inside CONNECT tunnels.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import product
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from quoteclip.errors import BadInput, SourceRefused, SourceTransient, SourceUnavailable

A, B = "Dkm0sjuzgPU", "BBBBBBBBBBB"


# ---- which addresses are private, and one answer for them all -----------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:0:7f00:1",  # SIIT IPv4-translated (RFC 7915) of 127.0.0.1
        "::ffff:0:a00:1",  # … of 10.0.0.1
        "::ffff:0:a9fe:a9fe",  # … of 169.254.169.254 (metadata)
        "64:ff9b:1::808:808",  # the local-use NAT64 prefix (RFC 8215), whatever it carries
        "64:ff9b:1:7f00:0:100::",  # … 127.0.0.1 in its RFC 6052 /48 layout
        "64:ff9b:1::7f00:1",
        "192.0.0.1",  # IETF protocol assignments (192.0.0.0/24)
        "192.0.0.9",
        "192.0.0.10",
        "192.0.0.170",
        "192.0.0.255",
        "fec0::1",  # deprecated site-local (fec0::/10)
        "feff:ffff::1",
        "3fff::1",  # IPv6 documentation (RFC 9637)
        "5f00::1",  # SRv6 segment identifiers (RFC 9602)
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1 (refused before too)
        "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo, client 10.0.0.1
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::10.0.0.1",  # IPv4-compatible
        "::",
        "::1",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "100.64.0.1",  # shared address space (carrier-grade NAT)
        "0.0.0.0",
        "169.254.169.254",
        "fd00:ec2::254",
    ],
)
def test_special_and_translated_addresses_are_refused(address: str) -> None:
    from sources.safety import check_url

    with pytest.raises(SourceRefused, match="does not resolve to a public address"):
        check_url(f"http://[{address}]/x.mp4" if ":" in address else f"http://{address}/x.mp4", None)


@pytest.mark.parametrize(
    "address",
    ["64:ff9b::808:808", "::ffff:0:808:808", "2002:808:808::1", "8.8.8.8", "2606:4700:4700::1111", "192.88.99.1"],
)
def test_public_addresses_and_their_translations_pass(address: str) -> None:
    from sources.safety import check_url

    url = f"http://[{address}]/x.mp4" if ":" in address else f"http://{address}/x.mp4"
    assert check_url(url, None).address == address


def test_an_allowed_network_opens_a_special_range_but_never_metadata() -> None:
    from sources.safety import check_url

    assert check_url("http://192.0.0.9/x", None, ("192.0.0.0/24",)).address == "192.0.0.9"
    with pytest.raises(SourceRefused):
        check_url("http://[::ffff:0:a9fe:a9fe]/x", None, ("::/0", "0.0.0.0/0"))


def test_a_refused_host_and_one_that_does_not_resolve_get_one_answer(queue_env) -> None:
    """check_url and the API answer a name resolving to loopback exactly as they answer a name that does not exist
    (the host named, no address): what the service's own names resolve to stays unknown. The operator's own command
    line names neither address but says which it is (a name that does not resolve is unavailable, exit 1)."""
    from fastapi.testclient import TestClient

    from api import create_app
    from quoteclip.settings import Settings
    from sources.safety import check_url

    hosts = ("localhost", "no-such-host.invalid")
    answers = []
    for host in hosts:
        with pytest.raises(SourceRefused) as refused:
            check_url(f"http://{host}:9/x.mp4", None)
        answers.append(str(refused.value).replace(host, "HOST"))
    assert (
        answers
        == [
            "source address not allowed: HOST "
            + ("does not resolve to a public address (QUOTECLIP_ALLOW_ADDRESSES opens private networks)")
        ]
        * 2
    )
    env = {**queue_env, "QUOTECLIP_SOURCE_HOSTS": "*"}
    env.pop("QUOTECLIP_ALLOW_ADDRESSES")
    client = TestClient(create_app(Settings.from_env(env)))
    api = [client.post("/clips", json={"source": f"http://{host}:9/x.mp4", "start": 1, "end": 2}) for host in hosts]
    assert [a.status_code for a in api] == [422, 422]
    assert api[0].json()["detail"].replace(hosts[0], "HOST") == api[1].json()["detail"].replace(hosts[1], "HOST")
    cli = [run_cli("render", f"http://{host}:9/x.mp4", "--start", "1", "--end", "2", env=env) for host in hosts]
    assert [c.returncode for c in cli] == [2, 1]
    assert cli[1].stderr.startswith(f"quoteclip: source unavailable: {hosts[1]} does not resolve (DNS: ")
    assert "127.0.0.1" not in cli[0].stderr + api[0].text


# ---- what a source URL names ------------------------------------------------------------------------------------


def yt_dlp_reads(url: str) -> str | None:
    """The video yt-dlp's YouTube extractor reads from ``url`` (its ``_match_valid_url``), the scheme and host
    lower-cased as URLs compare them (yt-dlp's pattern spells ``.com`` in lower case)."""
    from yt_dlp.extractor.youtube import YoutubeIE

    parts = urlsplit(url)
    match = YoutubeIE._match_valid_url(
        urlunsplit(parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower()))
    )
    return match.group("id") if match else None


def accepted_forms() -> list[str]:
    """The forms the identity accepts, each host with each path form, extra parameters before and after, a time in
    the fragment, http and https."""
    hosts = ["youtube.com", "www.youtube.com", "m.youtube.com", "music.youtube.com", "www.youtube-nocookie.com"]
    paths = [f"/watch?v={A}", f"/watch/?v={A}"] + [f"/{form}/{A}" for form in ("shorts", "embed", "live", "v", "e")]
    extras = ["", "t=42", "si=aBc-12_x", "feature=share", "start=3", "list=PLrAXtmErZgOeiKm4sgNOknGvNjby9efdf&index=2"]
    forms = []
    for scheme, host, path, extra, fragment in product(("https", "http"), hosts, paths, extras, ("", "#t=3")):
        route, _, query = path.partition("?")
        for params in {"&".join(p for p in (query, extra) if p), "&".join(p for p in (extra, query) if p)}:
            forms.append(f"{scheme}://{host}{route}{'?' if params else ''}{params}{fragment}")
        if host == "www.youtube.com" and route == "/watch":
            forms.append(f"{scheme}://youtu.be/{A}{'?' if extra else ''}{extra}{fragment}")
    return forms + [f"HTTPS://WWW.YOUTUBE.COM/watch?v={A}#t=3", f"https://www.youtube.com/shorts/{A}/"]


def test_every_youtube_form_the_identity_accepts_names_the_video_yt_dlp_reads() -> None:
    """For every accepted form, yt-dlp's YouTube matcher reads the identity's video from the user's URL, and from
    the URL yt-dlp is given (rebuilt from the identity: suitable, same id, same identity again)."""
    from yt_dlp.extractor.youtube import YoutubeIE

    from sources.identity import page_url, url_identity

    forms = accepted_forms()
    assert len(forms) > 1000
    for url in forms:
        assert url_identity(url) == f"youtube:{A}", url
        assert yt_dlp_reads(url) == A, url
        if "list=" not in url:  # yt-dlp hands a URL with a playlist to its playlist extractors, which the page
            assert YoutubeIE.suitable(url.replace("HTTPS://WWW.YOUTUBE.COM", "https://www.youtube.com")), url
        rebuilt = page_url(url)  # read instead: the video alone
        assert rebuilt == f"https://www.youtube.com/watch?v={A}"
        assert YoutubeIE.suitable(rebuilt) and YoutubeIE._match_id(rebuilt) == A
        assert url_identity(rebuilt) == url_identity(url)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        (f"https://www.youtube.com/watch?%76={A}&v={B}", "spells the parameter v as '%76'"),
        (f"https://www.youtube.com/watch?x=1;v={B}&v={A}", "separates its parameters with ';'"),
        (f"https://www.youtube.com/watch?v={A}#/watch?v={B}", "#fragment holding a path"),
        (f"https://www.youtube.com/watch?v={A}&v={B}", "gives v= more than once"),
        (f"https://www.youtube.com/watch?s=x&amp;v={B}&v={A}", "separates its parameters with ';'"),
        (f"https://www.youtube.com/embed/{A}#/embed/{B}", "#fragment holding a path"),
        (f"https://m.youtube.com/shorts/{A}#/v/{B}", "#fragment holding a path"),
        (f"https://youtu.be/{A}?v={B}&v={B}", "gives v= more than once"),
        (f"https://www.youtube.com/watch?v%3D={B}&v={A}", None),  # a name that only decodes to "v=": not v
    ],
)
def test_youtube_urls_read_two_ways_are_refused(url: str, why: str | None) -> None:
    """The red team's three forms and their kin: yt-dlp reads video B from most of them, Python's URL parser video
    A. Each is refused in one line naming the field and the reason (or, where yt-dlp and the identity agree, read
    as that video)."""
    from sources.identity import url_identity

    if why is None:
        assert url_identity(url) == f"youtube:{A}" and yt_dlp_reads(url) == A
        return
    with pytest.raises(BadInput) as refused:
        url_identity(url)
    message = str(refused.value)
    assert message.startswith("source: this YouTube URL ") and why in message and "\n" not in message, message
    assert type(refused.value) is BadInput


YOUTUBE_PIECES = st.lists(
    st.sampled_from(
        ["v=" + A, "v=" + B, "%76=" + B, "V=" + B, "x=1", "t=42", ";", "&", "&amp;", "#", "#/", "#!", "watch?v=" + B]
        + ["/", "?", "list=PL1", "v%3D" + B, "+v=" + B, "=", "embed/" + B, "%26v=" + B]
    ),
    max_size=6,
)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["https://www.youtube.com", "https://m.youtube.com", "https://youtu.be", "https://youtube.com"]),
    st.sampled_from(["/watch?v=" + A, "/watch?x=0&v=" + A, f"/embed/{A}", f"/shorts/{A}", f"/{A}", "/watch?"]),
    YOUTUBE_PIECES,
)
def test_any_youtube_url_is_refused_or_names_what_yt_dlp_reads(host: str, path: str, pieces: list[str]) -> None:
    """Whatever is appended to a YouTube link: the identity refuses it (one line), names no YouTube video, or
    names the one yt-dlp's YouTube matcher reads."""
    from sources.identity import url_identity

    url = host + path + "".join(pieces)
    try:
        identity = url_identity(url)
    except BadInput as exc:
        assert "\n" not in str(exc) and str(exc).startswith("source: ")
        return
    if identity.startswith("youtube:"):
        assert yt_dlp_reads(url) == identity.removeprefix("youtube:"), url


def test_a_refused_youtube_url_is_a_422_from_the_api_and_exit_2_from_the_command_line(queue_env) -> None:
    from fastapi.testclient import TestClient

    from api import create_app
    from quoteclip.settings import Settings

    url = f"https://www.youtube.com/watch?%76={A}&v={B}"
    client = TestClient(create_app(Settings.from_env(queue_env)))
    answer = client.post("/clips", json={"source": url, "start": 1, "end": 2})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith("bad input: source: this YouTube URL spells the parameter v as '%76'")
    done = run_cli("render", url, "--start", "1", "--end", "2", env=queue_env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"quoteclip: bad input: source: this YouTube URL spells the parameter v as '%76'; write v=, got {url!r}"
    ]


def test_every_other_url_is_read_without_its_fragment() -> None:
    from sources.identity import page_url, url_identity

    for url in (
        "https://cdn.example/ep.mp4#t=3",
        "https://vimeo.com/12345#/watch?v=" + B,
        f"https://yewtu.be/page#/watch?v={B}",  # an Invidious host yt-dlp's YouTube extractor reads fragments on
        "https://www.youtube.com/@channel#x",
        "https://www.youtube.com/watch?v=short",
    ):
        assert page_url(url) == url_identity(url).removeprefix("url:") == url.split("#")[0]


class PageServer:
    """A loopback page server whose pages misbehave by name; records each request's headers."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.bodies: dict[str, tuple[bytes, dict[str, str]]] = {}  # name -> (body, extra headers)
        self.statuses: dict[str, int] = {}  # name -> status (else 200)
        self.got = threading.Event()  # a request arrived
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                server.got.set()
                name = self.path.lstrip("/").split("?")[0]
                try:
                    getattr(self, name.replace("-", "_").removesuffix(".html"), self.page)(name)
                except OSError:  # the client (the egress proxy) hung up: what the limits are for
                    pass

            def page(self, name: str) -> None:
                body, extra = server.bodies.get(name, (b'<html><body><video src="/v.mp4"></video></body></html>', {}))
                self.send_response(server.statuses.get(name, 200))
                for key, value in {"Content-Type": "text/html", **extra}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def drip(self, data: bytes, every: float) -> None:
                """``data`` a byte at a time, one every ``every`` seconds (30 s at most)."""
                until = time.monotonic() + 30
                for byte in data:
                    if server.stop.is_set() or time.monotonic() > until:
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(every)

            def drip_headers(self, name: str) -> None:  # a status line, then one header byte at a time
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                self.drip(b"X-Slow: " + b"a" * 400 + b"\r\n\r\n", 0.2)

            def drip_body(self, name: str) -> None:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1000\r\n\r\n<html>")
                self.drip(b" " * 994, 0.2)

            def silent(self, name: str) -> None:  # headers, then nothing
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1000\r\n\r\n<html>")
                self.wfile.flush()
                server.stop.wait(30)

            def endless(self, name: str) -> None:  # fast enough for any rate floor, and never done
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100000000\r\n\r\n")
                self.wfile.write(b"<html><body>")
                until = time.monotonic() + 30
                while not server.stop.is_set() and time.monotonic() < until:
                    self.wfile.write(b" " * 4096)
                    self.wfile.flush()
                    time.sleep(0.05)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{name}"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def pages() -> Iterator[PageServer]:
    server = PageServer()
    yield server
    server.close()


def extract_page(url: str, tmp_path: Path) -> Any:
    from renderer.ffmpeg import ffmpeg_binary
    from sources.ytdlp import extract

    return extract(url, tmp_path, ffmpeg_binary(None), ("127.0.0.1/32",))


def test_yt_dlp_is_given_the_page_the_identity_names(pages, tmp_path) -> None:
    """A #fragment is not part of what a URL names (the clip key drops it), yet yt-dlp reads one as smuggled
    options (__youtubedl_smuggle: a Referer to send, a video id to force, extractors to skip): the page it is
    given is rebuilt from the identity, so none of that reaches it."""
    from yt_dlp.utils import smuggle_url

    smuggled = smuggle_url(pages.url("page.html"), {"referer": "http://referer.example/", "force_videoid": "x"})
    found = extract_page(smuggled, tmp_path)
    assert found.video.url == pages.url("v.mp4")
    assert [seen["path"] for seen in pages.seen] == ["/page.html"]
    assert "referer" not in pages.seen[0], pages.seen[0]


def test_a_youtube_page_that_answers_with_another_video_is_refused() -> None:
    from sources.ytdlp import same_video

    url = f"https://youtu.be/{A}"
    assert same_video(url, {"id": A, "title": "t"}) == {"id": A, "title": "t"}
    with pytest.raises(SourceUnavailable, match=f"source page {A} answered with another video \\({B}\\)"):
        same_video(url, {"id": B, "title": "a trailer"})
    assert same_video("https://cdn.example/page", {"id": "page"}) == {"id": "page"}  # other sites: their own id


# ---- the egress proxy answers only its own extraction ---------------------------------------------------------------


def raw_request(port: int, head: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head.encode())
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and not head.startswith("GET"):
                break
        return answer


def knock(port: int, target: int) -> bytes:
    """What a listener answers a CONNECT to ``target`` without a credential (nothing, if it does not answer)."""
    try:
        return raw_request(port, f"CONNECT 127.0.0.1:{target} HTTP/1.1\r\nHost: x\r\n\r\n")[:12]
    except OSError:
        return b""


def test_the_egress_proxy_refuses_requests_without_its_credential(http_source) -> None:
    """Another local process asking the running proxy (CONNECT, or a plain http request) without the extraction's
    credential, or with a wrong one, gets 407 and reaches nothing; with it, the same request goes through."""
    from sources.egress import EgressProxy
    from sources.safety import proxy_headers

    (http_source.root / "inside.html").write_text("inside")
    target = http_source.server.server_address[1]
    with EgressProxy(("127.0.0.1/32",)) as egress, EgressProxy(("127.0.0.1/32",)) as other:
        port = egress.server.server_address[1]
        credential = "".join(f"{k}: {v}\r\n" for k, v in proxy_headers(egress.url).items())
        wrong = "".join(f"{k}: {v}\r\n" for k, v in proxy_headers(other.url).items())  # another extraction's
        for auth in ("", wrong, "Proxy-Authorization: Basic cXVvdGVjbGlwOg==\r\n"):
            tunnel = raw_request(port, f"CONNECT 127.0.0.1:{target} HTTP/1.1\r\nHost: x\r\n{auth}\r\n")
            plain = raw_request(port, f"GET {http_source.url('inside.html')} HTTP/1.1\r\nHost: x\r\n{auth}\r\n")
            for answer in (tunnel, plain):
                assert answer.startswith(b"HTTP/1.1 407 ") and b'Proxy-Authenticate: Basic realm="quoteclip"' in answer
        assert http_source.requests == {} and egress.refused == egress.failed == [] and egress.unauthorized == 6
        passed = raw_request(port, f"GET {http_source.url('inside.html')} HTTP/1.1\r\nHost: x\r\n{credential}\r\n")
    assert passed.startswith(b"HTTP/1.1 200") and passed.endswith(b"inside")
    assert http_source.requests == {"inside.html": 1}
    assert urlsplit(egress.url).password not in urlsplit(other.url).geturl()


# ---- what a page may cost: decompressed size ---------------------------------------------------------------------


def test_yt_dlp_requests_go_through_the_capped_handler_alone() -> None:
    """An extraction's YoutubeDL holds two request handlers: ours for http(s) (yt-dlp's requests-based one, each
    response capped, each request asking its connection to close: the egress proxy's limits are per connection)
    and one for data: URLs only; not yt-dlp's urllib handler, which inflates a response whole before it is read."""
    from yt_dlp.networking.common import Request
    from yt_dlp.networking.exceptions import UnsupportedRequest

    from sources.ytdlp import ResponseCap, youtube_dl

    cap = ResponseCap(1024)
    with youtube_dl({"quiet": True}, cap) as ydl:
        handlers = ydl._request_director.handlers
        assert sorted(handlers) == ["Data", "Quoteclip"]
        ours = handlers["Quoteclip"]
        assert ours.cap is cap
        ours.validate(Request("https://example.com/"))
        with serving_headers() as (url, seen):
            assert ydl.urlopen(Request(url)).read() == b"ok"
            assert seen[0]["Connection"] == "close"
            assert handlers["Data"].send(Request("data:text/plain,x")).read() == b"x"
        with pytest.raises(UnsupportedRequest):
            handlers["Data"].validate(Request("http://example.com/"))
        handlers["Data"].validate(Request("data:text/plain,x"))


@contextmanager
def serving_headers() -> Iterator[tuple[str, list[Any]]]:
    """A loopback server answering "ok", keeping each request's headers."""
    seen: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    finally:
        server.shutdown()
        server.server_close()


def bomb(encoding: str, megabytes: int = 300) -> bytes:
    """An HTML page of ``megabytes`` MB (a header, then spaces) compressed with ``encoding``: about 300 KB."""
    head, block = b"<!DOCTYPE html><html><body>", b" " * 1024**2
    if encoding == "br":
        import brotli

        compressor = brotli.Compressor(quality=5)
        return b"".join([compressor.process(head), *(compressor.process(block) for _ in range(megabytes))]) + (
            compressor.finish()
        )
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    return b"".join([deflate.compress(head), *(deflate.compress(block) for _ in range(megabytes)), deflate.flush()])


MEASURE = """
import json, sys
from pathlib import Path
from renderer.ffmpeg import ffmpeg_binary
from sources.ytdlp import extract

def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))

extract(sys.argv[1], Path(sys.argv[3]), ffmpeg_binary(None), ("127.0.0.1/32",))  # a plain page first: warm
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) starts again from here
before = kib("VmRSS")
try:
    extract(sys.argv[2], Path(sys.argv[3]), ffmpeg_binary(None), ("127.0.0.1/32",))
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"before": before * 1024, "peak": kib("VmHWM") * 1024, "error": error}))
"""


@pytest.mark.parametrize(("encoding", "status"), [("gzip", 200), ("br", 200), ("gzip", 403)])
def test_a_compressed_page_is_inflated_no_further_than_the_cap(pages, tmp_path, encoding: str, status: int) -> None:
    """A 300 MB page sent as about 300 KB of gzip (or brotli; or as a 403 error page, whose body yt-dlp reads to
    look for a Cloudflare challenge): the extraction fails naming QUOTECLIP_PAGE_MAX_MB (32 MB by default), and its
    process's peak memory grows by less than twice the cap (measured in a process of its own: the worker's
    work-horse and the API run the same extraction)."""
    body = bomb(encoding)
    assert len(body) < 2 * 1024**2
    pages.bodies["bomb.html"] = (body, {"Content-Encoding": encoding})
    pages.statuses["bomb.html"] = status
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUOTECLIP_")}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, pages.url("page.html"), pages.url("bomb.html"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    grew = (measured["peak"] - measured["before"]) / 1024**2
    print(
        f"\n{encoding} page of 300 MB ({len(body)} bytes sent, HTTP {status}): the extraction's memory "
        f"{measured['before'] / 1024**2:.0f} MB before, {measured['peak'] / 1024**2:.0f} MB at its peak "
        f"(+{grew:.0f} MB)"
    )  # RELIABILITY.md quotes it
    assert measured["error"] == (
        "SourceUnavailable: source page could not be read: a response it needs is over 32 MB decompressed "
        "(QUOTECLIP_PAGE_MAX_MB)"
    )
    assert grew < 2 * 32  # the bytes read up to the cap, held once


@pytest.mark.slow
def test_a_compressed_page_does_not_inflate_in_a_running_api(pages, queue_env) -> None:
    """POST /previews (made in the API process) of a page of 300 MB sent gzip-compressed: the answer names the
    cap, and the API's memory at its peak (VmHWM, reset before the request) is less than twice the cap above what
    it was (the bytes read up to the cap, held once)."""
    from testkit.faces import serving, user_env

    pages.bodies["bomb.html"] = (bomb("gzip"), {"Content-Encoding": "gzip"})

    def kib(pid: int, field: str) -> int:
        status = Path(f"/proc/{pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith(field + ":")).split()[1]) * 1024

    with serving(user_env(queue_env)) as (server, _, base):
        body = {"source": pages.url("page.html"), "start": 1, "end": 2}
        post_json(f"{base}/previews", body)  # warm: a page read once
        Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
        before = kib(server.pid, "VmRSS")
        status, answer = post_json(f"{base}/previews", {**body, "source": pages.url("bomb.html")})
        after = kib(server.pid, "VmHWM")
    print(
        f"\nPOST /previews of a 300 MB page sent gzip-compressed: the API's memory {before / 1024**2:.0f} MB before, "
        f"{after / 1024**2:.0f} MB at its peak (+{(after - before) / 1024**2:.0f} MB)"
    )  # RELIABILITY.md quotes it
    assert status == 503, answer
    assert "over 32 MB decompressed (QUOTECLIP_PAGE_MAX_MB)" in answer["detail"]
    assert after - before < 2 * 32 * 1024**2  # the bytes read up to the cap, held once


def post_json(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# ---- what a page may cost: time --------------------------------------------------------------------------------

SHORT = {"QUOTECLIP_PAGE_STALL": "1", "QUOTECLIP_PAGE_MIN_RATE": "1", "QUOTECLIP_PAGE_TIMEOUT": "4"}
CUT = {
    "drip-headers": ("min_rate", "a server it needs averaged under 1 KB/s (QUOTECLIP_PAGE_MIN_RATE)"),
    "drip-body": ("min_rate", "a server it needs averaged under 1 KB/s (QUOTECLIP_PAGE_MIN_RATE)"),
    "silent": ("stall", "a server it needs sent nothing for 1 s (QUOTECLIP_PAGE_STALL)"),
    "endless": ("timeout", "a server it needs took over 4 s (QUOTECLIP_PAGE_TIMEOUT)"),
}


@pytest.mark.parametrize("name", list(CUT))
def test_a_page_that_drips_stalls_or_never_ends_is_cut_at_its_limit(pages, tmp_path, monkeypatch, name: str) -> None:
    """A status line then a header byte every 0.2 s; headers then a body byte every 0.2 s; headers then silence;
    a body at 80 KB/s that never ends: each extraction fails with the limit it went past, as soon as it did."""
    for key, value in SHORT.items():
        monkeypatch.setenv(key, value)
    began = time.monotonic()
    with pytest.raises(SourceTransient) as cut:
        extract_page(pages.url(name), tmp_path)
    took = time.monotonic() - began
    print(f"\n{name}: the extraction failed {took:.1f} s after it began ({CUT[name][0]})")  # RELIABILITY.md quotes it
    assert str(cut.value) == f"source page could not be read: {CUT[name][1]}"
    limit = 4 if name == "endless" else 1
    assert limit <= took < limit + 4, took  # yt-dlp starts up first


@pytest.mark.parametrize("name", list(CUT))
def test_a_tunnel_that_drips_stalls_or_never_ends_is_cut_at_its_limit(pages, name: str) -> None:
    """The same servers behind CONNECT (how yt-dlp reaches https pages; the proxy cannot read inside): the tunnel
    is closed at the limit, which the proxy records."""
    from sources.egress import EgressProxy, PageLimits
    from sources.safety import proxy_headers

    limits = PageLimits(timeout=4, stall=1, min_rate=1024, max_bytes=1024**2)
    port = pages.server.server_address[1]
    with EgressProxy(("127.0.0.1/32",), limits=limits) as egress:
        credential = "".join(f"{k}: {v}\r\n" for k, v in proxy_headers(egress.url).items())
        with socket.create_connection(("127.0.0.1", egress.server.server_address[1]), timeout=30) as conn:
            conn.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{credential}\r\n".encode())
            assert conn.recv(4096).startswith(b"HTTP/1.1 200")
            began = time.monotonic()
            conn.sendall(f"GET /{name} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            while conn.recv(65536):
                pass
            took = time.monotonic() - began
        deadline = time.monotonic() + 5
        while not egress.cut and time.monotonic() < deadline:
            time.sleep(0.02)
    assert egress.cut == [CUT[name][0]]
    limit = 4 if name == "endless" else 1
    assert limit - 0.1 <= took < limit + 2, took


def test_the_page_limits_are_settings() -> None:
    from quoteclip.settings import env_text
    from sources.egress import page_limits

    assert page_limits({}) == page_limits({"QUOTECLIP_PAGE_TIMEOUT": ""})
    default = page_limits({})
    assert (default.timeout, default.stall, default.min_rate, default.max_bytes) == (60, 20, 4096, 32 * 1024**2)
    assert page_limits({**SHORT, "QUOTECLIP_PAGE_MAX_MB": "0.5"}).max_bytes == 512 * 1024
    for name in (*SHORT, "QUOTECLIP_PAGE_MAX_MB"):
        assert env_text(name, {name: "1"}) == "1"
        with pytest.raises(BadInput, match=f"{name} must be a number, got 'soon'"):
            page_limits({name: "soon"})


def test_no_listener_of_a_running_extraction_serves_another_process(pages, http_source, tmp_path, monkeypatch) -> None:
    """While an extraction runs (its page dripping), every loopback port this process listens on is asked, as
    another process would, to tunnel to a server inside: the extraction's proxy answers 407, nothing gets through."""
    import psutil

    for key, value in SHORT.items():
        monkeypatch.setenv(key, value)
    (http_source.root / "inside.html").write_text("inside")
    target = http_source.server.server_address[1]
    known = {pages.server.server_address[1], target}
    running = threading.Thread(
        target=lambda: pytest.raises(SourceTransient, extract_page, pages.url("drip-body"), tmp_path)
    )
    running.start()
    try:
        assert pages.got.wait(10), "the extraction did not start"
        listening = {
            c.laddr.port
            for c in psutil.Process().net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.ip == "127.0.0.1" and c.laddr.port not in known
        }
        answers = {port: knock(port, target) for port in listening}
    finally:
        running.join(timeout=30)
    assert b"HTTP/1.1 407" in answers.values(), answers
    assert all(not answer.startswith(b"HTTP/1.1 200") for answer in answers.values()), answers
    assert http_source.requests == {}
