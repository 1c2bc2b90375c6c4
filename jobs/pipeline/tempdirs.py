"""One temp folder per render, named by the rendering process, so folders of killed processes can be swept; the
free space a render needs on its folders; and error messages with this machine's paths taken out."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from quoteclip.media import TEMP_PREFIX

CLIP_BYTES_PER_SECOND = 1024**2  # room a job needs in its temp folder for each second of each clip it renders


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


def free_bytes(folder: Path) -> int:
    """Free space for this user on the file system holding ``folder`` (or, if it does not exist yet, its nearest
    existing parent)."""
    path = folder.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def short_of_space(folders: dict[str, Path], need: dict[str, int]) -> str | None:
    """None when every folder (named by its role) has the free space ``need`` asks of it; else a line saying
    which is short, by how much (no path: it may reach a client)."""
    for role, folder in folders.items():
        try:
            free = free_bytes(folder)
        except OSError as exc:
            return f"the {role} folder cannot be checked ({exc.strerror})"
        if free < need.get(role, 0):
            return f"the {role} folder has {free / 1024**2:.1f} MB free, under the {need[role] / 1024**2:.1f} MB needed"
    return None


def clip_bytes(seconds: float, profiles: int = 1) -> int:
    """Room in the temp folder for a job's clips (beyond the worker's own minimum)."""
    return int(seconds * profiles * CLIP_BYTES_PER_SECOND)


# An absolute path of this machine in an error's text: a slash not preceded by a letter, digit, colon or slash
# (so URLs, whose paths follow their host, are left alone), then path characters, quoted or not.
_PATH = re.compile(r"""(?P<q>['"]?)(?<![\w:/.~-])/(?:[\w.+@%~=-]+/?)+(?P=q)""")
HIDDEN = "(a file on the worker)"


def hide_paths(text: str, keep: Iterable[str] = ()) -> str:
    """``text`` with every absolute file path taken out (a worker's temp folder, its cache, its install), except
    the ones in ``keep`` (what the request itself named, such as a local source the operator allows)."""
    kept = {k for k in keep if k}

    def replace(match: re.Match[str]) -> str:
        bare = match.group(0).strip("'\"")
        return match.group(0) if bare in kept else HIDDEN

    return _PATH.sub(replace, text)
