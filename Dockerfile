# quoteclip: the worker (default) and the API from one image. Everything comes from pip, as in CI:
# ffmpeg (imageio-ffmpeg), the JavaScript runtime for yt-dlp (deno), fonts (font wheels). No apt packages.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    QUOTECLIP_STORAGE_DIR=/data/clips \
    QUOTECLIP_CACHE_DIR=/data/source-cache \
    QUOTECLIP_LOG_FORMAT=json

WORKDIR /app
COPY pyproject.toml README.md worker.py constraints.txt ./
COPY quoteclip ./quoteclip
COPY cli ./cli
COPY renderer ./renderer
COPY watermarks ./watermarks
COPY jobs ./jobs
COPY sources ./sources
COPY storage ./storage
COPY api ./api
# The project itself with the speaker extra (OpenCV's face model), each dependency at the version CI tested
# (constraints.txt). YouTube moves faster than a release: `--build-arg YTDLP=2026.11.20` (or `YTDLP=latest`) takes
# that yt-dlp alone instead (docs/sources.md, "When YouTube changes").
ARG YTDLP=""
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[speaker]" -c constraints.txt \
    && if [ "$YTDLP" = latest ]; then pip install --no-cache-dir --upgrade "yt-dlp[default]" yt-dlp-ejs; \
       elif [ -n "$YTDLP" ]; then pip install --no-cache-dir "yt-dlp[default]==$YTDLP"; fi \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin quoteclip \
    && mkdir -p /data \
    && chown quoteclip:quoteclip /data

USER 10001
VOLUME ["/data"]
EXPOSE 8000
# Redis and the clip store answer (the API container also serves GET /healthz).
HEALTHCHECK --interval=30s --timeout=10s --start-period=20s --retries=3 CMD ["quoteclip", "health"]
# SIGTERM: the worker lets its current render finish (QUOTECLIP_SHUTDOWN_GRACE seconds at most).
STOPSIGNAL SIGTERM
CMD ["quoteclip", "worker"]
