"""Names for media that every layer shares."""

from __future__ import annotations

import io
from typing import IO

Readable = str | io.RawIOBase | IO[bytes]  # a path or URL, or a seekable binary file (what a probe reads)

# Demuxers for real media files only: no playlists (hls, dash), concat, image sequences or lavfi, so no file
# can make ffmpeg open another file or address. The renderer opens sources with it, and sources remux with it.
MEDIA_FORMATS = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,mpegts,avi,flv,ogg,mp3,aac,wav,asf,mxf,mpeg,h264,hevc"

# A render's temp folders start with this, then the pid of the process rendering: folders of dead processes are
# swept (jobs.pipeline.tempdirs).
TEMP_PREFIX = "quoteclip-"
