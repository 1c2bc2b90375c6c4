"""Signed clip links: the canonical form (one clip, one link), the signature (any change refused), expiry, and
the JavaScript signer in the docs making the same links byte for byte (run under Deno, from its wheel)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quoteclip import links
from quoteclip.links import LinkError, LinkExpired
from quoteclip.spec import parse_time

ROOT = Path(__file__).resolve().parent.parent
SEED = {
    "source": "https://www.youtube.com/watch?v=Dkm0sjuzgPU",
    "start": "18:54.0",
    "end": "19:01.0",
    "caption": "This weird scheduling, which I'm quite sure people are going to start replicating it, is to "
    "reduce the bubble, the wastage.",
    "watermark": "StarZero",
}
SECRET = "s3cret-of-the-site"


def path_of(link: str) -> str:
    return link[link.index("/l/") :]


@given(
    st.integers(0, 23),  # a link names times up to 24 hours (links.MAX_MS)
    st.integers(0, 59),
    st.integers(0, 59),
    st.integers(0, 999),
    st.sampled_from(["hms", "ms", "s", "number"]),
)
def test_a_link_reads_a_time_as_quoteclip_does(h: int, m: int, s: int, ms: int, form: str) -> None:
    seconds = h * 3600 + m * 60 + s + ms / 1000
    text = {
        "hms": f"{h}:{m:02d}:{s:02d}.{ms:03d}",
        "ms": f"{h * 60 + m}:{s:02d}.{ms:03d}",
        "s": f"{h * 3600 + m * 60 + s}.{ms:03d}",
        "number": seconds,
    }[form]
    assert links.milliseconds(text, "start") == round(parse_time(text) * 1000)


def test_one_clip_one_link() -> None:
    """Times in any form, text with spaces around it, defaults named or not: one canonical clip, one link."""
    one = links.sign(SEED, "starzero", SECRET, "https://clips.example")
    same = links.sign(
        {
            **SEED,
            "start": 1134,
            "end": 1141.0,
            "caption": f"  {SEED['caption']} ",
            "profile": "landscape",
            "quality": "final",
            "style": {"preset": "boxed"},
            "watermark": {"text": "StarZero"},
        },
        "starzero",
        SECRET,
        "https://clips.example/",
    )
    assert one == same
    assert links.canonical({**SEED, "profile": "vertical"})["p"] == "vertical"
    assert set(links.canonical(SEED)) == {"s", "a", "b", "c", "w"}
    assert links.sign(SEED, "starzero", SECRET, variant="poster").endswith(".jpg")
    assert links.sign(SEED, "starzero", SECRET, variant="captions").endswith(".vtt")


def test_the_seeds_link_fits_in_an_href() -> None:
    link = links.sign(SEED, "starzero", SECRET, "https://clips.example.com")
    long = links.sign({**SEED, "caption": "x" * 200}, "starzero", SECRET, "https://clips.example.com")
    print(f"seed clip link: {len(link)} characters; with a 200-character caption: {len(long)}")
    assert len(link) < 400 and len(long) < 500


def test_a_link_verifies_and_names_its_clip() -> None:
    link = links.sign(SEED, "starzero", SECRET, variant="download")
    clip = links.verify(path_of(link), {"starzero": SECRET})
    assert clip == {
        "source": SEED["source"],
        "start": 1134.0,
        "end": 1141.0,
        "caption": SEED["caption"],
        "watermark": "StarZero",
        "variant": "download",
    }


def test_any_change_to_a_link_is_refused() -> None:
    """Every byte of the path: a changed character anywhere, another key id, another key's signature, another
    extension, a payload re-encoded out of canonical form."""
    secrets = {"starzero": SECRET, "other": "another-secret"}
    a_year = int(time.time()) + 365 * 86400
    link = path_of(links.sign({**SEED, "profile": "vertical"}, "starzero", SECRET, expires=a_year))
    for at in range(len("/l/"), len(link)):
        if link[at] in "/.":
            continue
        for replacement in ("A", "-", "z"):
            if replacement != link[at]:
                with pytest.raises(LinkError):
                    links.verify(link[:at] + replacement + link[at + 1 :], secrets)
    key_id, payload, sig, _ = links.parse(link)
    for forged in (
        f"/l/other/{payload}.{sig}.mp4",  # another key id
        f"/l/starzero/{payload}.{links.signature('another-secret', 'starzero', payload)}.mp4",  # another secret
        f"/l/starzero/{payload}.{sig}.jpg",  # another variant's extension
    ):
        with pytest.raises(LinkError):
            links.verify(forged, secrets)
    spaced = links.base64.urlsafe_b64encode(json.dumps(links.decode(payload), indent=1).encode()).decode().rstrip("=")
    with pytest.raises(LinkError, match="canonical"):
        links.verify(f"/l/starzero/{spaced}.{links.signature(SECRET, 'starzero', spaced)}.mp4", secrets)
    with pytest.raises(LinkError, match="signature"):
        links.verify(link, {"other": "another-secret"})  # a removed key: its links are refused


def test_a_link_past_its_expiry_is_expired_and_expiries_are_rounded() -> None:
    link = path_of(links.sign(SEED, "starzero", SECRET, expires=1_000_000))
    assert links.verify(link, {"starzero": SECRET}, now=999_999)["expires"] == 1_000_000
    with pytest.raises(LinkExpired):
        links.verify(link, {"starzero": SECRET}, now=1_000_001)
    day, hour = 86_400, 3600
    made = 500 * hour - day + 10  # links made 50 minutes apart within one step of an hour are one link
    assert links.rounded_expiry(day, now=made) == links.rounded_expiry(day, now=made + 3000) == 500 * hour + hour
    assert links.rounded_expiry(day, now=made) >= made + day


@pytest.mark.parametrize(
    ("clip", "message"),
    [
        ({**SEED, "start": "19:01", "end": "18:54"}, "end must be after start"),
        ({**SEED, "start": "1.0005"}, "start must be"),
        ({**SEED, "profile": "widescreen"}, "profile must be one of"),
        ({**SEED, "pad_before": 1.0}, "a link cannot carry pad_before"),
        ({**SEED, "watermark": {"text": "A", "opacity": 0.5}}, "watermark"),
        ({**SEED, "caption": "bad \ud800 text"}, "caption must be well-formed"),
    ],
)
def test_what_a_link_cannot_carry_is_refused_naming_the_field(clip: dict[str, object], message: str) -> None:
    with pytest.raises(LinkError, match=message):
        links.sign(clip, "starzero", SECRET)


SPECS = [
    SEED,
    {**SEED, "start": 1134, "end": 1141.25, "profile": "vertical", "fit": "blur", "style": "karaoke"},
    {"source": "https://cdn.example/ep.mp4", "start": "0:01", "end": "0:02.5", "quality": "preview"},
    {**SEED, "caption": 'Ünïcödé — “quotes”, 日本語, emoji 🎬, "escapes" \\ and \n new line'},
    {**SEED, "watermark": {"logo": "asset:" + "a" * 64 + ".png"}},
    {**SEED, "caption": "x" * 1000},
]


def test_the_javascript_signer_makes_the_same_links(tmp_path: Path) -> None:
    """docs/signer.js under Deno (the deno wheel's binary) signs every spec and variant as quoteclip/links.py
    does, byte for byte, expiry included."""
    from deno import find_deno_bin

    cases = [
        {"clip": clip, "variant": variant, "expires": expires}
        for clip in SPECS
        for variant in ("clip", "download", "poster", "captions")
        for expires in (None, 1_800_000_000)
    ]
    script = tmp_path / "sign.mjs"
    script.write_text(
        f'import {{ signLink }} from "{(ROOT / "docs" / "signer.js").as_uri()}";\n'
        "const cases = JSON.parse(await new Response(Deno.stdin.readable).text());\n"
        "const out = [];\n"
        "for (const c of cases) out.push(await signLink(c.clip, "
        '{ keyId: "starzero", secret: "s3cret-of-the-site", base: "https://clips.example", '
        "variant: c.variant, expires: c.expires }));\n"
        "console.log(JSON.stringify(out));\n"
    )
    done = subprocess.run(
        [str(find_deno_bin()), "run", "--quiet", "--no-prompt", "--allow-read", str(script)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        env={"DENO_DIR": str(tmp_path / "deno"), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    expected = [
        links.sign(c["clip"], "starzero", SECRET, "https://clips.example", c["variant"], c["expires"]) for c in cases
    ]
    assert json.loads(done.stdout) == expected


def test_the_signer_module_needs_only_the_standard_library() -> None:
    """A site's backend copies quoteclip/links.py alone: it imports the standard library and nothing else."""
    import ast
    import sys

    tree = ast.parse((ROOT / "quoteclip" / "links.py").read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert all(node.level == 0 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom))
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported


def test_quoteclip_sign_prints_the_link_the_signer_makes(tmp_path: Path) -> None:
    """``quoteclip sign`` reads the key from its setting and prints the link the module makes (one line); what
    the service would refuse is refused with exit 2 naming the field: an option a link cannot carry, a host or a
    length the key does not allow, an unknown key, an expiry past the key's lifetime."""
    from conftest import run_cli

    keys = tmp_path / "keys.json"
    keys.write_text(
        json.dumps(
            {
                "keys": [
                    {"id": "starzero", "secret": SECRET, "hosts": ["youtube.com"], "max_seconds": 30},
                    {"id": "short", "secret": "another-long-secret", "lifetime": 3600},
                ]
            }
        )
    )
    env = {"QUOTECLIP_SITE_KEYS_FILE": str(keys), "QUOTECLIP_LINK_BASE_URL": "https://clips.example"}
    args = ["sign", SEED["source"], "--start", "18:54.0", "--end", "19:01.0", "--caption", SEED["caption"]]
    done = run_cli(*args, "--watermark", "StarZero", "--site", "starzero", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == links.sign(SEED, "starzero", SECRET, "https://clips.example") + "\n"
    poster = run_cli(*args, "--site", "starzero", "--as", "poster", "--base-url", "https://cdn.example/", env=env)
    clip = {k: v for k, v in SEED.items() if k != "watermark"}
    assert poster.stdout.strip() == links.sign(clip, "starzero", SECRET, "https://cdn.example", "poster")
    expiring = run_cli(*args, "--site", "short", "--json", env=env)
    body = json.loads(expiring.stdout)
    assert body["expires"] is not None and links.verify(path_of(body["link"]), {"short": "another-long-secret"})
    for extra, message in (
        (["--site", "starzero", "--font", "a.ttf"], "--font: a link cannot carry it"),
        (["--site", "starzero", "--end", "19:30"], "over the 30 s the key starzero allows"),
        (["--site", "nobody"], "site: no key 'nobody'"),
        (["--site", "short", "--expires", "7200"], "over the key short's link lifetime of 3600 s"),
        (["--site", "starzero", "--as", "gif"], "--as must be one of clip, download, poster, captions"),
    ):
        refused = run_cli(*args, *extra, env=env)
        assert refused.returncode == 2 and message in refused.stderr, (extra, refused.stderr)
        assert refused.stderr.count("\n") == 1 and refused.stdout == ""
    elsewhere = run_cli("sign", "https://vimeo.com/1", "--start", "1", "--end", "2", "--site", "starzero", env=env)
    assert elsewhere.returncode == 2 and "may clip youtube.com only" in elsewhere.stderr
