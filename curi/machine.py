"""What this process may use of the machine."""

from __future__ import annotations

import os

__all__ = ["available_cores"]


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask on Linux, so ``taskset`` and
    container CPU sets count), else the machine's count; at least 1. The default number of
    worker processes of every command."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
