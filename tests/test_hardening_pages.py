"""What a source URL names, what reading a page may cost, and which addresses are private.

- A host that does not resolve and one that resolves to a refused address get one answer; the address checks
  refuse every special range and translated form.
"""

from __future__ import annotations

import pytest
from conftest import run_cli

from quoteclip.errors import SourceRefused

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
