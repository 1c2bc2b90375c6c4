"""The ffmpeg command is data: assert the argv without running ffmpeg."""

from __future__ import annotations

from fractions import Fraction

from quoteclip.spec import ClipSpec
from renderer.plan import SEQUENCE_FORMATS, STILL_FORMATS, Overlay, build_command, output_rate
from renderer.probe import FORMATS, MediaInfo

INFO = MediaInfo(
    duration=1200, width=1920, height=1080, rotation=0, fps=30, frame_rate="30", video_codec="h264", has_audio=True
)


def test_landscape_with_overlays_exact_argv() -> None:
    spec = ClipSpec(source="in.mp4", start="18:54.0", end="19:01.0")
    argv = build_command(spec, INFO, "/src/in.mp4", [Overlay("/t/caption.png", 66, 504)], "/t/clip.mp4", "ffmpeg")
    assert argv == [
        "ffmpeg",
        "-format_whitelist",
        FORMATS,
        "-protocol_whitelist",
        "file",
        "-ss",
        "1133.9995",
        "-t",
        "7.000",
        "-threads",
        "1",
        "-i",
        "/src/in.mp4",
        "-format_whitelist",
        STILL_FORMATS,
        "-protocol_whitelist",
        "file",
        "-i",
        "/t/caption.png",
        "-filter_complex",
        "[0:v]scale=1280:720:flags=bicubic:force_divisible_by=2:force_original_aspect_ratio=decrease[s0];"
        "[s0]pad=1280:720:(ow-iw)/2:(oh-ih)/2[s1];[s1]setsar=1[s2];"
        "[s2][1]overlay=eof_action=repeat:x=66:y=504[s3];"
        "[s3]format=yuv420p[s4];"
        "[0:a]afade=d=0.15:st=0:t=in[s5];[s5]afade=d=0.15:st=6.85:t=out[s6]",
        "-map",
        "[s4]",
        "-map",
        "[s6]",
        "-f",
        "mp4",
        "-b:a",
        "128k",
        "-acodec",
        "aac",
        "-ar",
        "48000",
        "-crf",
        "23",
        "-force_key_frames",
        "expr:gte(t,n_forced*1)",
        "-fps_mode",
        "cfr",
        "-map_metadata",
        "-1",
        "-movflags",
        "+faststart",
        "-preset",
        "veryfast",
        "-r",
        "30",
        "-t",
        "7.000",
        "-vcodec",
        "libx264",
        "-vframes",
        "210",
        "/t/clip.mp4",
        "-hide_banner",
        "-nostdin",
        "-nostats",
        "-loglevel",
        "error",
        "-progress",
        "pipe:1",
        "-y",
    ]


def test_picture_fades_only_when_asked() -> None:
    plain = " ".join(build_command(ClipSpec(source="in.mp4", start=1, end=3), INFO, "in.mp4", [], "o.mp4"))
    assert "afade" in plain and "fade=d" not in plain.replace("afade=d", "")
    faded = ClipSpec(source="in.mp4", start=1, end=3, video_fades=True, fades=False)
    text = " ".join(build_command(faded, INFO, "in.mp4", [], "o.mp4"))
    assert "fade=d=0.15:st=0:t=in" in text and "afade" not in text


def test_encoder_preset_of_final_renders_only() -> None:
    def preset(**fields: object) -> str:
        argv = build_command(ClipSpec(source="in.mp4", start=1, end=3, **fields), INFO, "in.mp4", [], "o.mp4")
        return argv[argv.index("-preset") + 1]

    assert preset() == "veryfast"
    assert preset(encoder_preset="superfast") == "superfast"
    assert preset(encoder_preset="ultrafast") == "ultrafast"
    assert preset(encoder_preset="superfast", quality="preview") == "ultrafast"  # a preview's own


def test_final_renders_of_sources_up_to_1080p_decode_in_one_thread() -> None:
    def decoder_threads(info: MediaInfo, **fields: object) -> str | None:
        argv = build_command(ClipSpec(source="in.mp4", start=1, end=3, **fields), info, "in.mp4", [], "o.mp4")
        before_source = argv[: argv.index("in.mp4")]
        return before_source[before_source.index("-threads") + 1] if "-threads" in before_source else None

    uhd = MediaInfo(
        duration=60, width=3840, height=2160, rotation=0, fps=30, frame_rate="30", video_codec="h264", has_audio=True
    )
    assert decoder_threads(INFO) == "1"
    assert decoder_threads(INFO, quality="preview") is None  # the decoder is a preview's slower stage
    assert decoder_threads(uhd) is None  # and a 4K source's


def test_remote_source_allows_network_protocols_only() -> None:
    spec = ClipSpec(source="https://cdn.example/ep.mp4", start=1, end=2)
    argv = build_command(spec, INFO, "https://cdn.example/ep.mp4", [], "/t/o.mp4")
    i = argv.index("https://cdn.example/ep.mp4")
    assert argv[1:i] == [
        "-format_whitelist",
        FORMATS,
        "-initial_request_size",
        "65536",
        "-multiple_requests",
        "1",
        "-protocol_whitelist",
        "http,https,tcp,tls",
        "-request_size",
        "262144",
        "-ss",
        "0.9995",
        "-t",
        "1.000",
        "-threads",
        "1",
        "-i",
    ]
    assert "hls" not in FORMATS and "concat" not in FORMATS


def test_separate_audio_stream_is_cut_the_same_way() -> None:
    spec = ClipSpec(source="https://www.youtube.com/watch?v=x", start=10, end=12, fades=False)
    argv = build_command(spec, INFO, "http://127.0.0.1:9/v", [], "/t/o.mp4", audio_source="http://127.0.0.1:9/a")
    a = argv.index("http://127.0.0.1:9/a")
    assert argv[a - 5 : a] == ["-ss", "9.9995", "-t", "2.000", "-i"]
    assert argv[argv.index("-map", argv.index("-map") + 1) + 1] == "1:a"


def test_silent_track_when_source_has_no_audio() -> None:
    spec = ClipSpec(source="in.mp4", start=1, end=3.5, fades=False)
    info = MediaInfo(**{**INFO.__dict__, "has_audio": False})
    argv = build_command(spec, info, "in.mp4", [], "/t/o.mp4")
    i = argv.index("anullsrc=r=48000:cl=stereo")
    assert ["-f", "lavfi", "-t", "2.500", "-i"] == argv[i - 5 : i]
    assert argv[argv.index("-map", argv.index("-map") + 1) + 1] == "1:a"


def test_vertical_blur_fill() -> None:
    spec = ClipSpec(source="in.mp4", start=1, end=3, profile="vertical", fit="blur")
    graph = build_command(spec, INFO, "in.mp4", [], "/t/o.mp4")[
        build_command(spec, INFO, "in.mp4", [], "/t/o.mp4").index("-filter_complex") + 1
    ]
    assert "split=2" in graph and "boxblur" in graph
    assert "scale=90:160:force_original_aspect_ratio=increase" in graph
    assert "scale=720:1280:flags=bicubic" in graph


def test_user_text_never_enters_the_command() -> None:
    nasty = "it's 5:00 \\ 100% %{pts} [x];[y] drawtext=text='pwn' \n ok"
    spec = ClipSpec(source="in.mp4", start=1, end=3, caption=nasty, watermark={"text": "a:b'c"})
    argv = build_command(spec, INFO, "in.mp4", [Overlay("/t/c.png", 0, 0)], "/t/o.mp4")
    joined = " ".join(argv)
    for fragment in ("pwn", "%{pts}", "a:b'c", "5:00"):
        assert fragment not in joined


def test_output_rate() -> None:
    assert output_rate(INFO) == 30
    assert output_rate(MediaInfo(**{**INFO.__dict__, "frame_rate": "30000/1001"})) == Fraction(30000, 1001)
    assert output_rate(MediaInfo(**{**INFO.__dict__, "frame_rate": "120"})) == 60
    assert output_rate(MediaInfo(**{**INFO.__dict__, "frame_rate": "", "fps": 0.0})) == 30


def test_preview_padding_and_caption_sequence() -> None:
    spec = ClipSpec(source="in.mp4", start=10, end=12, quality="preview", pad_before=1, pad_after=0.5)
    argv = build_command(spec, INFO, "in.mp4", [Overlay("/t/captions.ffconcat", 0, 500, sequence=True)], "/t/o.mp4")
    i = argv.index("in.mp4")
    assert argv[i - 5 : i] == ["-ss", "8.9995", "-t", "3.500", "-i"]  # the pads widen the cut
    j = argv.index("/t/captions.ffconcat")
    assert argv[j - 9 : j] == [
        "-f",
        "concat",
        "-format_whitelist",
        SEQUENCE_FORMATS,
        "-protocol_whitelist",
        "file",
        "-safe",
        "0",
        "-i",
    ]
    graph = argv[argv.index("-filter_complex") + 1]
    assert "scale=640:360" in graph
    assert argv[argv.index("-preset") + 1] == "ultrafast" and argv[argv.index("-crf") + 1] == "28"


def test_center_crop_fit() -> None:
    spec = ClipSpec(source="in.mp4", start=1, end=3, profile="vertical", fit="center")
    graph = build_command(spec, INFO, "in.mp4", [], "/t/o.mp4")
    joined = graph[graph.index("-filter_complex") + 1]
    assert "scale=720:1280:flags=bicubic:force_original_aspect_ratio=increase" in joined
    assert "crop=720:1280" in joined
