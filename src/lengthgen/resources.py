"""Memory checks made before anything large is allocated.

A size a user can type (``--digits``, ``--d-model``, ``--max-digits``, …) can ask for more memory
than the machine has. Rather than let the allocator fail with a traceback, or the kernel end the
process (and slow the whole machine first), a command estimates what it needs and refuses up front:
``needs about 12.3 GB, 8.1 GB free``. :class:`ResourceError` is a :class:`~lengthgen.cli.UsageError`,
so every command reports it as one line with exit status 2.

The estimates are deliberately coarse (they count the big arrays, not every temporary). Set the
environment variable ``LENGTHGEN_IGNORE_MEMORY=1`` to skip the check and try anyway.
"""
from __future__ import annotations

import os

from .cli import UsageError

IGNORE_ENV = "LENGTHGEN_IGNORE_MEMORY"
GB = 1e9


class ResourceError(UsageError, MemoryError):
    """The work would need more memory than the machine has free."""


def available_bytes() -> int | None:
    """Memory free for a new allocation (``MemAvailable`` of /proc/meminfo), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def require_memory(needed: float, what: str) -> None:
    """Raise :class:`ResourceError` when ``needed`` bytes exceed the free memory (unless
    ``LENGTHGEN_IGNORE_MEMORY=1``). ``what`` names the work, e.g. ``"a 10^9-digit addition"``."""
    if needed < 256 * 2**20 or os.environ.get(IGNORE_ENV) == "1":
        return
    free = available_bytes()
    if free is not None and needed > free:
        raise ResourceError(f"{what} needs about {needed / GB:.3g} GB of memory, {free / GB:.3g} GB free "
                            f"(set {IGNORE_ENV}=1 to try anyway)")
