"""Probe → plan → run."""
