"""``quoteclip check CLIP``: a clip's quality report (renderer/qa.py): black stretches, frozen frames, long
silences, loudness and true peak against its platform's, and a cut that falls inside a word."""

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from quoteclip.errors import BadInput
from quoteclip.settings import Settings

from .app import app
from .common import JsonOpt, emit, run_guarded


@app.command("check")
def check(
    clip: Annotated[str, typer.Argument(help="A rendered clip (an mp4; its .manifest.json beside it is read).")],
    *,
    transcript: Annotated[
        str | None, typer.Option("--transcript", help="Words to check the cut's ends against (else the clip's own).")
    ] = None,
    platform: Annotated[
        str | None, typer.Option("--platform", help="Check loudness against this platform (else the clip's own).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Report what a viewer would notice in a clip: black (0.5 s or more), frozen frames (2 s), silences (1.5 s
    under -50 dB), loudness and true peak against the platform's, a cut inside a word (over 40 ms). Exit 0 when
    nothing was found, 1 with the findings listed."""

    def go() -> None:
        from quoteclip.platforms import PLATFORMS, TRUE_PEAK
        from quoteclip.spec import Word
        from renderer.ffmpeg import ffmpeg_binary
        from renderer.probe import probe
        from renderer.qa import check as qa_check

        path = Path(clip)
        if not path.is_file():
            raise BadInput(f"clip: not a file: {clip!r}")
        spec: dict[str, Any] = {}
        sidecar = path.with_suffix(".manifest.json")
        if sidecar.is_file():
            try:
                spec = dict(json.loads(sidecar.read_text(encoding="utf-8")).get("spec") or {})
            except (OSError, ValueError):
                raise BadInput(f"clip: its manifest cannot be read: {str(sidecar)!r}") from None
        name = platform or spec.get("platform")
        if name is not None and name not in PLATFORMS:
            raise BadInput(f"platform must be one of {', '.join(PLATFORMS)}, got {name!r}")
        target = PLATFORMS[name].loudness if name else spec.get("loudness")
        if transcript is not None:
            from quoteclip.transcript import load_transcript

            words = load_transcript(transcript)
        else:
            words = [Word(w["text"], float(w["start"]), float(w["end"])) for w in spec.get("words") or []]
        cut = (float(spec["start"]), float(spec["end"])) if "start" in spec and "end" in spec else None
        try:
            info = probe(str(path))
        except Exception as exc:  # noqa: BLE001  (whatever the probe says: the file is not a clip)
            raise BadInput(f"clip: not a readable video: {str(path)!r} ({exc})".splitlines()[0]) from None
        report = qa_check(
            str(path),
            ffmpeg_binary(Settings.from_env().ffmpeg_binary),
            info.duration,
            info.has_audio,
            words,
            cut,
            target,
            TRUE_PEAK if name or target is not None else None,
        )
        lines = [f"{f['kind']}: {f['said']}" for f in report.findings] or ["nothing found"]
        emit(report.to_json(), as_json, "\n".join(lines))
        if not report.ok:
            raise typer.Exit(1)

    run_guarded(go, as_json)
