"""The HTTP API (``quoteclip serve``): clips, batches, downloads, health, metrics and a demo page."""

from .app import create_app

__all__ = ["create_app"]
