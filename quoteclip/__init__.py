"""quoteclip: render exact-quote video clips with captions and a watermark, inline or behind a queue."""

__version__ = "0.1.0"

# Bumped whenever a change alters the pixels or bytes of a rendered clip: it is part of the
# content hash, so clips rendered by an older renderer are not served for new requests.
RENDERER_VERSION = "5"
