"""What this machine measures of itself: memory available, and how many processes the kernel's out-of-memory
killer has ended. A failure is taken for the machine's only on such evidence, read right after it (see
quoteclip/errors.py); never on a message's text, which can carry a URL or a remote reason phrase."""

from __future__ import annotations

from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def available_memory() -> int | None:
    """Bytes of memory available to this process's machine or container (the smaller of the two), None where it
    cannot be read (not Linux)."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:  # cgroup v2: the container's limit less what it uses
        limit = (CGROUP / "memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int((CGROUP / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def oom_kills() -> int | None:
    """Processes the kernel's out-of-memory killer has ended so far, in this container's cgroup (v2's
    ``memory.events``) and on the whole machine (``/proc/vmstat``), added up: a count that rose while a
    process ran, and the process was killed, is the evidence that it was killed for memory. None where
    neither can be read."""
    total, read = 0, False
    for path, key in ((CGROUP / "memory.events", "oom_kill"), (Path("/proc/vmstat"), "oom_kill")):
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    total, read = total + int(value), True
        except (OSError, ValueError):
            continue
    return total if read else None
