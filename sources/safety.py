"""URL safety: an allowlist of source hosts, and no private, loopback, link-local or metadata addresses.

Checked for the URL a caller gives, for every media URL an extractor returns, and on every redirect. The
address a name resolves to is checked and then used for the connection (no second lookup to rebind).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import urllib3
import urllib3.connection

from quoteclip.errors import BadInput, SourceRefused, SourceTransient
from quoteclip.settings import loopback_hint

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Always refused, whatever the settings say: cloud metadata endpoints.
METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}


@dataclass(frozen=True)
class CheckedURL:
    url: str
    scheme: str
    host: str
    port: int
    address: str  # the vetted IP to connect to
    path: str  # path and query, for the request line


def connection_pool(
    target: CheckedURL, timeout: urllib3.Timeout, maxsize: int = 4, proxy: str | None = None
) -> urllib3.HTTPConnectionPool:
    """A connection pool to the vetted address of ``target`` (TLS checked against its host name): no second DNS
    lookup between the check and the connection. ``proxy`` (the operator's ``QUOTECLIP_PROXY``): the pool reaches
    the vetted address through it (CONNECT for https; absolute-form requests for http, see ``request_target``)."""
    tls: dict[str, Any] = {"server_hostname": target.host, "assert_hostname": target.host, "cert_reqs": "CERT_REQUIRED"}
    if proxy is not None:
        manager = urllib3.ProxyManager(proxy, timeout=timeout, maxsize=maxsize, proxy_headers=proxy_headers(proxy))
        kwargs = tls if target.scheme == "https" else {}
        return manager.connection_from_host(target.address, target.port, target.scheme, pool_kwargs=kwargs)
    if target.scheme == "https":
        return urllib3.HTTPSConnectionPool(target.address, target.port, timeout=timeout, maxsize=maxsize, **tls)
    return urllib3.HTTPConnectionPool(target.address, target.port, timeout=timeout, maxsize=maxsize)


def connection_to(target: CheckedURL, timeout: float) -> urllib3.connection.HTTPConnection:
    """One connection to the vetted address of ``target`` (TLS checked against its host name), made with urllib3's
    public connection classes (``urllib3.connection``): connected on its first request; its caller holds it (a
    webhook's deadline shuts its socket down)."""
    if target.scheme == "https":
        return urllib3.connection.HTTPSConnection(
            target.address,
            target.port,
            timeout=timeout,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs="CERT_REQUIRED",
        )
    return urllib3.connection.HTTPConnection(target.address, target.port, timeout=timeout)


def request_target(target: CheckedURL, proxy: str | None) -> str:
    """The request line's target: the path, or through a proxy for plain http the absolute URL of the vetted
    address (the proxy connects to what we checked, not to a name it would resolve itself)."""
    if proxy is not None and target.scheme == "http":
        host = f"[{target.address}]" if ":" in target.address else target.address
        return f"http://{host}:{target.port}{target.path}"
    return target.path


def proxy_tunnel(proxy: str, address: str, port: int, timeout: float) -> socket.socket:
    """A socket to ``address:port`` through the operator's HTTP proxy (``CONNECT``); OSError when it refuses."""
    parts = urlsplit(proxy)
    sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=timeout)
    host = f"[{address}]" if ":" in address else address
    head = f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in proxy_headers(proxy).items())
    try:
        sock.sendall((head + "\r\n").encode("latin-1"))
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = sock.recv(4096)
            if not data or len(answer) > 16 * 1024:
                raise OSError("the proxy closed the connection")
            answer += data
        status = answer.split(b" ", 2)[1:2]
        if status != [b"200"]:
            raise OSError(f"the proxy answered {answer.splitlines()[0][:80]!r}")
    except BaseException:
        sock.close()
        raise
    return sock


def proxy_headers(proxy: str) -> dict[str, str]:
    """``Proxy-Authorization`` for a proxy URL that carries ``user:password@`` (urllib3 does not take them from the
    URL itself), else nothing."""
    parts = urlsplit(proxy)
    if not parts.username:
        return {}
    import base64
    from urllib.parse import unquote

    token = base64.b64encode(f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()).decode()
    return {"Proxy-Authorization": f"Basic {token}"}


def host_header(target: CheckedURL) -> str:
    return target.host if target.port in (80, 443) else f"{target.host}:{target.port}"


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """``host`` is an allowed host or a subdomain of one (``www.youtube.com`` under ``youtube.com``)."""
    host = host.lower().rstrip(".")
    return any(host == a or host.endswith("." + a) for a in allowed)


# IPv6 ranges that carry an IPv4 address inside and reach it: the well-known NAT64 prefix (RFC 6052), SIIT's
# IPv4-translated addresses (::ffff:0:a.b.c.d, RFC 7915), and (tested apart, below) 6to4, Teredo, IPv4-mapped and
# IPv4-compatible addresses. The address they reach is the embedded one, so it is checked too.
TRANSLATED = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::ffff:0:0:0/96"))
# Never a public source, whatever the standard library's is_global says of them (it calls them global): IETF
# protocol assignments (192.0.0.0/24, RFC 6890), the local-use NAT64 prefix (64:ff9b:1::/48, RFC 8215: a local
# network's translator), deprecated site-local IPv6 (fec0::/10, RFC 3879), IPv6 documentation (3fff::/20, RFC 9637)
# and SRv6 segment identifiers (5f00::/16, RFC 9602).
NOT_PUBLIC = tuple(
    ipaddress.ip_network(net) for net in ("192.0.0.0/24", "64:ff9b:1::/48", "fec0::/10", "3fff::/20", "5f00::/16")
)
# One answer for a host that does not resolve and one that resolves only to an address sources may not use: which
# of the two it is would tell how the service's own network names resolve.
NOT_REACHABLE = "does not resolve to a public address (QUOTECLIP_ALLOW_ADDRESSES opens private networks)"


class HostUnresolved(SourceRefused):
    """A source host that does not resolve at all. A request from a website is answered as one resolving to a
    refused address is (``NOT_REACHABLE``: the answer must not tell how the service's own names resolve); the
    operator's own command line says what it is, ``unavailable()`` (cli/common.py)."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"source address not allowed: {host} {NOT_REACHABLE}")
        self.host, self.reason = host, reason

    def __reduce__(self) -> tuple[type[HostUnresolved], tuple[str, str]]:  # pickled as it was made
        return type(self), (self.host, self.reason)

    def unavailable(self) -> SourceTransient:
        """The failure as the operator is told it: the name does not resolve (it may, later: not bad input)."""
        return SourceTransient(f"{self.host} does not resolve (DNS: {self.reason})")


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in net for net in TRANSLATED) or int(address) >> 32 == 0:  # or IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_allowed(address: IPAddress, allowed_networks: Iterable[str]) -> bool:
    inner = embedded_ipv4(address)
    if address in METADATA or (inner is not None and inner in METADATA):
        return False
    for net in allowed_networks:
        if address in ipaddress.ip_network(net, strict=False):
            return True
    if any(address in net for net in NOT_PUBLIC):
        return False
    if inner is not None:
        return address_allowed(inner, allowed_networks)
    return address.is_global and not address.is_multicast


def check_url(
    url: str,
    allowed_hosts: Iterable[str] | None,
    allowed_networks: Iterable[str] = (),
) -> CheckedURL:
    """Refuse what is not http(s), not on the allowlist (when one is given) or resolves to a refused address."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:  # bad IPv6 brackets, and the like
        raise BadInput(f"source URL is malformed: {url[:200]!r}") from None
    if parts.scheme not in {"http", "https"}:
        raise SourceRefused(f"source scheme {parts.scheme!r} is not allowed (http and https only): {url}")
    host = (hostname or "").lower()
    if host and not host.isascii():
        raise BadInput(f"source URL host must be ASCII (IDNA-encoded), got {host[:100]!r}")
    if not host:
        raise BadInput(f"source URL has no host: {url!r}")
    if parts.username or parts.password:
        raise SourceRefused(f"source URLs with credentials are not allowed: {host}")
    if allowed_hosts is not None and not host_allowed(host, allowed_hosts):
        raise SourceRefused(f"source host not allowed: {host} (see QUOTECLIP_SOURCE_HOSTS{loopback_hint(host)})")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise BadInput(f"source URL has a bad port: {url!r}") from None
    address = resolve(host, port)
    if address is None or not address_allowed(address, allowed_networks):
        raise SourceRefused(f"source address not allowed: {host} {NOT_REACHABLE}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return CheckedURL(url, parts.scheme, host, port, str(address), path)


def resolve(host: str, port: int) -> IPAddress | None:
    """The first address ``host`` resolves to (the one the connection then uses); None when the name has no
    address; HostUnresolved when it does not exist."""
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
        return literal
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)}:
            raise HostUnresolved(host, exc.strerror or "no such name") from None
        raise SourceTransient(f"source host could not be resolved ({exc.strerror}): {host}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    return addresses[0] if addresses else None
