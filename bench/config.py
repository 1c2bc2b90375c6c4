"""What one run of the benchmark does: built once from the command's arguments and handed to every figure."""

from __future__ import annotations

from dataclasses import dataclass

# every clip carries this caption (a 110-character quote) and the StarZero watermark
CAPTION = (
    "This weird scheduling, which I'm quite sure people are going to start replicating it, is to reduce the bubble."
)
BRAND = "StarZero"
SITE_KEY = ("bench", "bench-site-secret-0123456789")  # the site key the links of figures 12 are signed with


@dataclass(frozen=True)
class RunConfig:
    """The sizes of a run. ``full()`` is the measurement BENCHMARKS.md reports; ``quick_check()`` is CI's check that
    every figure's code still runs (each path at least once, with as little work as that takes: 2 s quotes, no
    warm-up, one repetition, one faster preset, batches of 2, one click during a batch): its figures are not
    measurements."""

    quick: bool
    minutes: float  # the generated 1080p source's length
    warmup: int  # runs of each side before the timed ones
    reps: int  # timed runs of each side (pairs, alternating)
    lengths: tuple[float, ...]  # quote lengths of figures 1 and 7a, seconds
    quote: float  # the quote length of every other figure but 2, seconds
    moviepy_length: float  # figure 2's quote, seconds
    clicks: int  # figure 3a's clicks (each a new quote, cold source cache)
    naive_runs: int  # figure 3b's downloads of the whole file
    hits: int  # figure 4's identical requests
    batch: int  # figures 5, 5b, 5c: quotes on the bulk queue
    presets: tuple[str, ...]  # figure 5c: the faster x264 presets, each a batch of its own
    busy_batch: int  # figure 3e: the batch the clicks arrive during
    busy_clicks: int  # figure 3e's clicks
    nudges: int  # figure 7d's previews
    import_runs: int  # figure 8c's runs of each import
    profile_quotes: int  # figure 10's quotes, each in 3 profiles
    page_quotes: int  # figure 11a's quotes from the page
    page_first: float  # figure 11a's first quote starts here, seconds into the episode
    hls_first: float  # figure 11b's first clip starts here
    first_frame_lengths: tuple[float, ...]  # figure 13's clip lengths, seconds
    first_frames: int  # figure 13's clicks per length (the source's bytes cached)
    cold_first_frames: int  # figure 13's clicks per length from a cold source cache
    split_length: float = 180.0  # figure 16's long clip, seconds
    split_seconds: float = 60.0  # figure 16: clips longer than this split
    piece_seconds: float = 15.0  # figure 16's pieces

    @classmethod
    def full(cls) -> RunConfig:
        return cls(
            quick=False,
            minutes=20,
            warmup=1,
            reps=9,
            lengths=(7.0, 30.0),
            quote=7.0,
            moviepy_length=7.0,
            clicks=18,
            naive_runs=4,
            hits=50,
            batch=10,
            presets=("superfast", "ultrafast"),
            busy_batch=20,
            busy_clicks=3,
            nudges=20,
            import_runs=9,
            profile_quotes=10,
            page_quotes=10,
            page_first=200.0,
            hls_first=300.0,
            first_frame_lengths=(7.0, 30.0, 120.0),
            first_frames=20,
            cold_first_frames=9,
        )

    @classmethod
    def quick_check(cls) -> RunConfig:
        return cls(
            quick=True,
            minutes=2,
            warmup=0,
            reps=1,
            lengths=(2.0,),
            quote=2.0,
            moviepy_length=1.0,
            clicks=1,
            naive_runs=1,
            hits=10,
            batch=2,
            presets=("ultrafast",),
            busy_batch=2,
            busy_clicks=1,
            nudges=5,
            import_runs=3,
            profile_quotes=1,
            page_quotes=2,
            page_first=20.0,
            hls_first=30.0,
            first_frame_lengths=(2.0, 7.0),
            first_frames=2,
            cold_first_frames=1,
            split_length=6.0,
            split_seconds=3.0,
            piece_seconds=2.0,
        )

    def describe(self) -> str:
        """The run's size, for the machine line above the table."""
        warm = "after a warm-up" if self.warmup else "without a warm-up"
        return f"source {self.minutes:g} min 1080p30 4 Mb/s; {self.reps} repetitions {warm}"
