"""One temp folder per render, named by the rendering process, so folders of killed processes can be swept."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

TEMP_PREFIX = "quoteclip-"  # + the pid of the process rendering: folders of dead processes are swept


def sweep_temp(folder: str | None = None) -> int:
    """Remove render folders left by processes that died mid-render (killed work-horses). Returns how many."""
    root = Path(folder or tempfile.gettempdir())
    removed = 0
    for path in root.glob(f"{TEMP_PREFIX}*-*"):
        pid = path.name.removeprefix(TEMP_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
