"""The quoteclip benchmark: ``python -m bench [--quick] [--json FILE]``. See BENCHMARKS.md.

``config`` (what a run does, full or quick), ``timing`` (alternating pairs, ratios, CPU-seconds), ``report`` (the
rows, the table, the JSON), ``stack`` (the services and workers), ``media`` (the generated sources),
``baselines`` (bare ffmpeg, moviepy, download-then-cut), ``inline`` (a render in this process); the figures:
``render`` (1, 1b, 2), ``queue`` (3a–3e, 4, 5, 5b, 5c, 6), ``cli`` (8a–8c), ``previews`` (7a–7d), ``creators``
(10, 11)."""
