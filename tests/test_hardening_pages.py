"""What a source URL names, what reading a page may cost, and which addresses are private.

- A host that does not resolve and one that resolves to a refused address get one answer; the address checks
  refuse every special range and translated form.
- The page yt-dlp reads is the one the clip key names: every YouTube form the identity accepts names, to yt-dlp's
  own YouTube matcher, the video the identity names; forms it would read as another video are refused; yt-dlp is
  given the URL rebuilt from the identity (a user's #fragment, which yt-dlp reads as smuggled options, is dropped).
- The egress proxy answers only its own extraction: a request without its credential gets 407 and reaches nothing.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import product
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from quoteclip.errors import BadInput, SourceRefused, SourceUnavailable

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
    """check_url, the API and the command line answer a name resolving to loopback exactly as they answer a name
    that does not exist (the host named, no address): what the service's own names resolve to stays unknown."""
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
    assert [c.returncode for c in cli] == [2, 2]
    assert cli[0].stderr.replace(hosts[0], "HOST") == cli[1].stderr.replace(hosts[1], "HOST")
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
                self.send_response(200)
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
