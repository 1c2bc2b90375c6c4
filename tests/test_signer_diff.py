"""The two signers against each other: Hypothesis makes clip specs (captions from all of Unicode, times as numbers
and as text in any script's digits, known and unknown fields, nested watermark and style objects, expiries in and
out of range), the Python signer (quoteclip/links.py) and docs/signer.js (under the deno wheel's binary, and
under Node when it is on PATH) sign each one, and both must make the same link byte for byte, or both refuse; a
link they make must verify with the service's verifier (``links.verify``), and some go through the API itself.

The JavaScript side runs once per runtime, as one process reading a case a line (tests/js/sign_lines.mjs): the
everyday tier runs a fixed set of examples (``derandomize``) and a random one, in seconds;
``QUOTECLIP_SIGNER_EXAMPLES=10000`` runs that many of each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import started
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quoteclip import links

ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cret-of-the-site-0123"
BASE = "https://clips.example"
EXAMPLES = int(os.environ.get("QUOTECLIP_SIGNER_EXAMPLES", "150"))

# Characters where trimming rules of languages differ (Python's str.strip() and JavaScript's trim() each remove
# some), the ASCII whitespace the canonical form trims, and text a Latin-1 decoding makes.
EDGY = [" ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x85", "\xa0", "\ufeff", "\u2028", "\u3000",
        "\u200b", "\u1680", "\x00", "\x7f", "\"", "\\", "/", "</script>", "…", "é", "🎬", "日本"]  # fmt: skip
DIGITS = "0123456789٠١٢٣٤٥٦٧٨٩۰۱０１２५"  # ASCII, Arabic-Indic, Extended Arabic-Indic, fullwidth, Devanagari


def text(max_size: int = 12) -> st.SearchStrategy[str]:
    piece = st.one_of(st.sampled_from(EDGY), st.text(st.characters(codec="utf-8"), max_size=4))
    return st.lists(piece, max_size=max_size).map("".join)


def mostly(good: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` four times in five, else ``odd``: most examples make a link, enough are refused."""
    return st.sampled_from(range(5)).flatmap(lambda n: odd if n == 4 else good)


def formatted(n: int) -> st.SearchStrategy[Any]:
    """``n`` milliseconds as a link's time may be written."""
    whole = [n // 1000] if n % 1000 == 0 else []
    return st.sampled_from(
        [
            n / 1000,
            *whole,
            f"{n // 60000}:{n // 1000 % 60:02d}.{n % 1000:03d}",
            f"{n // 3600000}:{n // 60000 % 60:02d}:{n // 1000 % 60:02d}.{n % 1000:03d}".rstrip("0"),
            f"{n / 1000}",
        ]
    ).flatmap(lambda t: st.tuples(PAD, st.just(t), PAD).map("".join) if isinstance(t, str) else st.just(t))


ms = st.integers(0, links.MAX_MS - 60_000)
PAD = st.sampled_from(["", "", "", "", " ", "\t", "\n", "\r\n", "\x0b\x0c"])  # the ASCII whitespace trimmed
TEXT_PAD = st.sampled_from(
    ["", "", "", " ", "\t", "\n", "\r\n", "\x0b\x0c", "\x85", "\xa0", "\ufeff", "\x1f", "\u3000"]
)
ODD_TIMES = st.one_of(
    st.tuples(st.sampled_from(["\x85", "\xa0", "\ufeff", "\x1f", "\u3000"]), ms.map(str)).map("".join),
    st.text(DIGITS + ":. \t\x85", max_size=10),  # any script's digits: ASCII digits only are read
    st.floats(-10, 100_000, allow_nan=False, allow_infinity=False),
    st.integers(links.MAX_MS - 5, links.MAX_MS + 5).flatmap(formatted),  # around 24 hours
    st.sampled_from([10**400, 10**30, -1, True, "", "1e3", "+5", "0x10", [], {}, 1e300, 5e-324, "1:60", "1:60:00"]),
)


def padded(values: list[str], pad: st.SearchStrategy[str] = TEXT_PAD) -> st.SearchStrategy[str]:
    return st.tuples(pad, st.sampled_from(values), pad).map("".join)


def choice(name: str) -> st.SearchStrategy[Any]:
    return mostly(padded(list(links.CHOICES[name]), PAD), st.sampled_from(["", "Vertical", "none", 3, ["pad"]]))


marks = mostly(
    st.one_of(
        text(),
        st.fixed_dictionaries({"text": text()}),
        st.fixed_dictionaries({"logo": padded(["asset:" + "a" * 64 + ".png", "brand:StarZero"])}),
    ),
    st.sampled_from(
        [{}, {"text": "a", "logo": "b"}, {"logo": ""}, {"text": None}, {"constructor": "x"}, {"__proto__": "x"}]
        + [["a"], 7, {"logo": "asset:x.png", "opacity": 1}]  # fmt: skip
    ),
)
optional: dict[str, st.SearchStrategy[Any]] = {
    "caption": st.one_of(text(30), st.just("x" * 3100)),
    "watermark": marks,
    "logo": mostly(padded(["asset:" + "b" * 64 + ".png", "brand:StarZero", ""]), text(3)),
    "profile": choice("profile"),
    "fit": choice("fit"),
    "style": mostly(st.one_of(choice("style"), st.fixed_dictionaries({"preset": choice("style")})), st.just({})),
    "quality": choice("quality"),
    "expires": st.sampled_from([0, 1.0, 1.5, -1, "5", True, 10**30, 10**400, 2_000_000_000]),
    "variant": choice("variant"),
    "constructor": st.just("x"),
    "__proto__": st.just({"x": 1}),
    "toString": st.just("x"),
    "hasOwnProperty": st.just("x"),
    "pad_before": st.just(1),
}
SOMETIMES = {"caption": 1, "watermark": 3, "logo": 8, "style": 3, "profile": 3, "fit": 3, "quality": 3}


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    start = draw(ms)
    end = start + draw(st.integers(1, 60_000))
    clip: dict[str, Any] = {
        "source": draw(
            mostly(padded(["https://www.youtube.com/watch?v=Dkm0sjuzgPU", "http://127.0.0.1:9/a.mp4"]), text(4))
        ),
        "start": draw(mostly(formatted(start), ODD_TIMES)),
        "end": draw(mostly(formatted(end), st.one_of(ODD_TIMES, formatted(start)))),
    }
    for name, strategy in optional.items():
        if draw(st.sampled_from(range(SOMETIMES.get(name, 40) + 1))) == SOMETIMES.get(name, 40):
            clip[name] = draw(strategy)
    if draw(st.sampled_from(range(41))) == 40:
        del clip[draw(st.sampled_from(["source", "start", "end"]))]
    variant = draw(st.sampled_from([*links.VARIANTS]))
    expires = draw(mostly(st.one_of(st.none(), st.integers(0, 2_000_000_000)), st.sampled_from([10**30, -1, 1.5, 7.0])))
    key_id = draw(st.sampled_from([None, "k1", "K-2_x"]))
    return {"clip": clip, "variant": variant, "expires": expires, "keyId": key_id}


class JsSigner:
    """docs/signer.js in one long-lived process of a runtime, asked one case a line."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        driver = ROOT / "tests" / "js" / "sign_lines.mjs"
        self.process = subprocess.Popen(
            [*command, str(driver), (ROOT / "docs" / "signer.js").as_uri()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env=env,
            bufsize=1,
        )

    def sign(self, case: dict[str, Any]) -> dict[str, str]:
        request = {"clip": case["clip"], "site": "starzero", "secret": SECRET, "base": BASE}
        request.update({"variant": case["variant"], "expires": case["expires"]})
        if case["keyId"] is not None:
            request["keyId"] = case["keyId"]
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        line = self.process.stdout.readline()
        assert line, f"the JavaScript signer ended (exit {self.process.poll()})"
        answer: dict[str, str] = json.loads(line)
        assert "crash" not in answer, answer["crash"]
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(30)
        self.process.stdout.close()


def runtimes(tmp: Path) -> Iterator[tuple[str, list[str]]]:
    from deno import find_deno_bin

    yield "deno", [str(find_deno_bin()), "run", "--quiet", "--no-prompt", "--allow-read"]
    node = shutil.which("node")
    if node is not None:
        yield "node", [node]


@pytest.fixture(scope="module", params=["deno", "node"])
def js(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JsSigner]:
    tmp = tmp_path_factory.mktemp("js")
    found = dict(runtimes(tmp))
    if request.param not in found:
        pytest.skip(f"{request.param} is not installed")
    env = {"DENO_DIR": str(tmp / "deno"), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    signer = JsSigner(found[request.param], env)
    yield signer
    signer.close()


def python_sign(case: dict[str, Any]) -> dict[str, str]:
    try:
        clip = json.loads(json.dumps(case["clip"]))  # what the JavaScript side reads: the same JSON
        link = links.sign(clip, "starzero", SECRET, BASE, case["variant"], case["expires"], key_id=case["keyId"])
    except links.LinkError as exc:
        return {"error": str(exc)}
    return {"link": link}


def check(js: JsSigner, case: dict[str, Any]) -> bool:
    """Both signers make one link, or both refuse; a link made verifies. Whether it was made."""
    ours, theirs = python_sign(case), js.sign(case)
    assert ("link" in ours) == ("link" in theirs), (case, ours, theirs)
    if "link" not in ours:
        return False
    assert ours["link"] == theirs["link"], case
    signer = links.signer("starzero", case["keyId"])
    expires = case["expires"]
    now = time.time() if expires is None else min(time.time(), expires - 1)
    clip = links.verify(links.path_of(ours["link"]), {signer: SECRET}, now=now)
    assert clip["variant"] == case["variant"]
    return True


SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
made: dict[str, int] = {}


@settings(SETTINGS, derandomize=True)
@given(case=cases())
def test_both_signers_make_one_link_or_both_refuse_fixed(js: JsSigner, case: dict[str, Any]) -> None:
    made["fixed"] = made.get("fixed", 0) + check(js, case)


@settings(SETTINGS, derandomize=False, print_blob=True)  # random even under CI=true (Hypothesis's "ci" profile)
@given(case=cases())
def test_both_signers_make_one_link_or_both_refuse_random(js: JsSigner, case: dict[str, Any]) -> None:
    made["random"] = made.get("random", 0) + check(js, case)


SEED = {"source": "https://www.youtube.com/watch?v=Dkm0sjuzgPU", "start": "18:54.0", "end": "19:01.0"}
REPORTED = [  # the disagreements found between the signers, each now one answer from both
    ({**SEED, "caption": "\x1fa quote\x85"}, "\x1fa quote\x85"),  # kept: not ASCII whitespace
    ({**SEED, "caption": "\ufeffa quote"}, "\ufeffa quote"),
    ({**SEED, "caption": " \t\na quote\r\x0b\x0c "}, "a quote"),  # the six characters trimmed
    ({**SEED, "caption": "\xa0a quote\u3000"}, "\xa0a quote\u3000"),
    ({**SEED, "start": "١١٣٤"}, None),  # Arabic-Indic digits
    ({**SEED, "end": "１１４１"}, None),  # fullwidth digits
    ({**SEED, "constructor": "x"}, None),
    ({**SEED, "__proto__": {"a": 1}}, None),
    ({**SEED, "watermark": {"logo": ""}}, ""),  # an empty logo is no logo
    ({**SEED, "watermark": {"logo": ""}, "logo": "brand:StarZero"}, None),  # a logo given twice
    ({**SEED, "logo": ""}, ""),
    ({**SEED, "start": 10**400}, None),
    ({**SEED, "start": "86400.001"}, None),
]


@pytest.mark.parametrize(("clip", "caption"), REPORTED)
def test_what_the_signers_once_disagreed_on(js: JsSigner, clip: dict[str, Any], caption: str | None) -> None:
    """Each case the two signers once answered differently: one link from both (its caption as the canonical form
    keeps it), or a refusal from both (``caption`` None)."""
    case = {"clip": clip, "variant": "clip", "expires": None, "keyId": None}
    assert check(js, case) is (caption is not None)
    if caption is not None:
        clip_of = links.verify(links.path_of(python_sign(case)["link"]), {"starzero": SECRET})
        assert clip_of.get("caption", "") == caption


def test_the_examples_make_links_as_well_as_refusals() -> None:
    """The property above is not vacuous: a good share of the examples make a link (and the rest are refused)."""
    fixed = made.get("fixed")
    if fixed is None:
        pytest.skip("run with the property tests")
    assert fixed >= EXAMPLES // 4, made
    print(f"links made: {made}, of {EXAMPLES} examples a test and runtime")


def test_links_the_javascript_signer_makes_are_answered_by_the_service(
    queue_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Through the API itself: generated clips (a fixed set) whose JavaScript-signed links are accepted by the
    service (a ``HEAD`` of a clip not stored is ``404``, a poster too, captions ``200``; never ``403``), keys with
    ids and without alike."""
    from fastapi.testclient import TestClient

    from api import create_app
    from quoteclip.settings import Settings

    queue_env.update(
        {
            "QUOTECLIP_SITE_KEYS": f"starzero:k1:{SECRET},starzero:K-2_x:{SECRET},starzero:{SECRET}",
            "QUOTECLIP_SOURCE_HOSTS": "127.0.0.1,www.youtube.com",
            "QUOTECLIP_ALLOW_LOCAL_SOURCES": "",
            "QUOTECLIP_STREAM": "false",
        }
    )
    app = started(TestClient(create_app(Settings.from_env(queue_env)), follow_redirects=False))
    env = {"DENO_DIR": str(tmp_path_factory.mktemp("deno")), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    from deno import find_deno_bin

    js = JsSigner([str(find_deno_bin()), "run", "--quiet", "--no-prompt", "--allow-read"], env)
    answered: list[int] = []

    @settings(SETTINGS, max_examples=40, derandomize=True)
    @given(case=cases())
    def answered_by_the_service(case: dict[str, Any]) -> None:
        case = {**case, "expires": None if case["expires"] is None else 2_000_000_000}
        made = js.sign(case)
        if "link" not in made:
            return
        answer = app.head(links.path_of(made["link"]))
        assert answer.status_code in (200, 404, 422), (case, answer.status_code, answer.text)
        answered.append(answer.status_code)

    try:
        answered_by_the_service()
    finally:
        js.close()
    assert len(answered) >= 5, answered


def _caption_filling(payload: int, unit: str) -> str:
    """A caption of ``unit`` repeated, as long as it can be while SEED's payload stays within ``payload``."""
    caption = ""
    while len(links.encode(links.canonical({**SEED, "caption": caption + unit}))) <= payload:
        caption += unit
    return caption


AT_THE_BOUND = _caption_filling(links.MAX_PAYLOAD, "x")
EDGES = [  # inputs a generator seldom reaches, each one answer from both signers: the link made, or None
    ({**SEED, "caption": AT_THE_BOUND}, True),  # the payload exactly MAX_PAYLOAD characters
    ({**SEED, "caption": AT_THE_BOUND + "xx"}, False),  # past it
    ({**SEED, "caption": _caption_filling(links.MAX_PAYLOAD, "é")}, True),  # two UTF-8 bytes a character
    ({**SEED, "caption": "\ud800"}, False),  # lone surrogates: not text either signer signs
    ({**SEED, "caption": "a\udc00b"}, False),
    ({**SEED, "caption": "🎬\ud83c"}, False),
    ({**SEED, "start": 1e21}, False),
    ({**SEED, "start": -0.0}, True),
    ({**SEED, "start": "0x10"}, False),
    ({**SEED, "start": " 12 "}, True),
    ({**SEED, "start": "1_000"}, False),
    ({**SEED, "start": "12."}, False),
    ({**SEED, "start": ".5"}, False),
    ({**SEED, "start": "1e1"}, False),
    ({**SEED, "start": "Infinity"}, False),
    ({**SEED, "start": 0.0005}, False),
    ({**SEED, "end": 86400.0005}, False),
]


@pytest.mark.parametrize(("clip", "made"), EDGES)
def test_edges_both_signers_answer_alike(js: JsSigner, clip: dict[str, Any], made: bool) -> None:
    assert len(links.encode(links.canonical({**SEED, "caption": AT_THE_BOUND}))) == links.MAX_PAYLOAD
    case = {"clip": clip, "variant": "clip", "expires": None, "keyId": "k1"}
    assert check(js, case) is made


@pytest.mark.parametrize("expires", [-0.0, 0, 1.8e9, 1e21, 2**53 + 1])
def test_edge_expiries_both_signers_answer_alike(js: JsSigner, expires: float) -> None:
    case = {"clip": SEED, "variant": "poster", "expires": expires, "keyId": None}
    assert check(js, case) is (expires < 2e9)


@pytest.mark.parametrize("secret", [None, "", 5, "half-\ud800-a-secret-0123"])
def test_a_missing_or_broken_secret_is_refused_by_both(js: JsSigner, secret: object) -> None:
    """``process.env.QUOTECLIP_SITE_SECRET`` unset is ``undefined``: the JavaScript signer signed with an empty key
    (Web Crypto takes it), links the service refuses with a 403 nobody could explain; a lone surrogate became U+FFFD
    in JavaScript and a UnicodeEncodeError in Python. Both now refuse, naming the secret."""
    request: dict[str, Any] = {"clip": SEED, "site": "starzero", "base": BASE, "variant": "clip", "expires": None}
    if secret is not None:
        request["secret"] = secret
    assert js.process.stdin is not None and js.process.stdout is not None
    js.process.stdin.write(json.dumps(request) + "\n")
    theirs = json.loads(js.process.stdout.readline())
    assert "secret" in theirs.get("error", ""), theirs
    with pytest.raises(links.LinkError, match="secret"):
        links.sign(SEED, "starzero", secret)  # type: ignore[arg-type]


@pytest.mark.parametrize("clip", [None, [], ["source"], "source", 5, True])
def test_a_clip_that_is_not_an_object_is_refused_by_both(js: JsSigner, clip: object) -> None:
    """``null`` was a TypeError in both, a list a TypeError in Python and ``a link cannot carry 0`` in JavaScript,
    text its characters' indices or its characters: both now say the clip must be an object."""
    theirs = js.sign({"clip": clip, "variant": "clip", "expires": None, "keyId": None})
    assert "clip must be an object" in theirs.get("error", ""), theirs
    with pytest.raises(links.LinkError, match="clip must be an object"):
        links.sign(clip, "starzero", SECRET)  # type: ignore[arg-type]
