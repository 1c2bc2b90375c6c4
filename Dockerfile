# quoteclip worker image: everything comes from pip (ffmpeg, fonts); no apt packages needed.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
RUN useradd --create-home --uid 10001 quoteclip
WORKDIR /app
COPY pyproject.toml README.md worker.py ./
COPY quoteclip ./quoteclip
COPY renderer ./renderer
COPY watermarks ./watermarks
COPY jobs ./jobs
COPY sources ./sources
COPY storage ./storage
RUN pip install .
USER quoteclip
ENV QUOTECLIP_STORAGE_DIR=/home/quoteclip/clips
CMD ["quoteclip", "worker"]
