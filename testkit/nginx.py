"""Debian's nginx with the shipped deploy/nginx.conf, its addresses and paths moved to loopback and a folder of its
own, nothing else changed unless a caller names the line (tests/test_nginx.py runs it as it is; the benchmark's
front-door figure raises its per-address limits above a crowd that comes from one address)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

from .services import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "deploy" / "nginx.conf"


def nginx_binary() -> str | None:
    """Debian's nginx (``apt-get install nginx``; ``.ci/run`` installs it), or None."""
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def rendered(folder: Path, port: int, upstreams: list[int], changes: list[tuple[str, str]] | None = None) -> Path:
    """The shipped config with its listening address, its upstreams and its files moved to loopback and ``folder``
    (and ``changes``, each ``(line, replacement)``): each replaced line must be found once, so the shipped file
    cannot drift from what is run."""
    text = SHIPPED.read_text()
    servers = "".join(f"        server 127.0.0.1:{p};\n" for p in upstreams)
    temp = "".join(
        f"    {kind}_temp_path {folder / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    for old, new in (
        ("pid /run/nginx-quoteclip.pid;", f"pid {folder / 'nginx.pid'};"),
        ("error_log /var/log/nginx/quoteclip-error.log warn;", f"error_log {folder / 'error.log'} info;"),
        ("access_log /var/log/nginx/quoteclip-access.log quoteclip;", f"access_log {folder / 'access.log'} quoteclip;"),
        ("        server 127.0.0.1:8000;\n        server 127.0.0.1:8001;\n", servers),
        ("proxy_cache_path /var/cache/nginx/quoteclip", f"proxy_cache_path {folder / 'cache'}"),
        ("        listen 80;", f"        listen 127.0.0.1:{port};"),
        ("http {\n", "http {\n" + temp),
        *(changes or []),
    ):
        if text.count(old) != 1:
            raise AssertionError(f"deploy/nginx.conf no longer holds {old!r} once: update testkit/nginx.py")
        text = text.replace(old, new)
    if os.geteuid() == 0:  # (its workers would be nobody, who cannot write the folder)
        text = "user root;\n" + text
    path = folder / "nginx.conf"
    path.write_text(text)
    return path


@contextlib.contextmanager
def nginx(
    binary: str, folder: Path, upstreams: list[int], changes: list[tuple[str, str]] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """nginx started with the rendered config in front of ``upstreams``: its base URL and its master process."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = rendered(folder, port, upstreams, changes)
    checked = subprocess.run([binary, "-t", "-c", str(config), "-p", str(folder)], capture_output=True, text=True)
    if checked.returncode != 0:
        raise AssertionError(f"nginx -t refused the rendered config: {checked.stderr}")
    process = subprocess.Popen(
        [binary, "-c", str(config), "-p", str(folder), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: _answers(port), 10, "nginx")
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False
