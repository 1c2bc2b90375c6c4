"""The quoteclip benchmark: ``python -m bench [--quick]``. See BENCHMARKS.md."""
