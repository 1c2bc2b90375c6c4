"""Development services for quoteclip's tests and benchmark, not part of the installed package (the wheel and the
Docker image leave it out): real services on loopback (``testkit.services``: a private redis-server, SeaweedFS,
an origin with Range support) and a loopback video site (``testkit.videosite``) with its yt-dlp extractor, a
plugin under ``testkit/plugins``.

Import it from the repository's root (pytest's ``pythonpath`` and ``python -m bench`` put the root on the path).
yt-dlp finds the extractor as it finds any plugin, in a ``yt_dlp_plugins`` package on the Python path: every
process that extracts from the video site needs ``PLUGINS`` on its ``sys.path`` (or ``PYTHONPATH``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

# the folder holding the ``yt_dlp_plugins`` namespace package
PLUGINS = Path(__file__).resolve().parent / "plugins"


def add_plugins_to_path() -> None:
    """Put the video site's extractor where yt-dlp looks, in this process (before yt-dlp first loads its plugins)."""
    if str(PLUGINS) not in sys.path:
        sys.path.insert(0, str(PLUGINS))


def with_plugins(env: Mapping[str, str]) -> str:
    """``PYTHONPATH`` for a child process that extracts: the plugins' folder before ``env``'s own entries."""
    return os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")]))


def product_packages() -> tuple[str, ...]:
    """The top-level packages the wheel ships, as pyproject.toml's package finder names them (``cli*`` → ``cli``)."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    return tuple(name.rstrip("*") for name in project["tool"]["setuptools"]["packages"]["find"]["include"])
