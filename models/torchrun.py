"""The ``torchrun`` environment of a process (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``), checked before any rendezvous; torch-free, so `curi train`
checks it with its config, before torch is imported or a bank is opened."""

from __future__ import annotations

import os

from curi.errors import ConfigError

__all__ = ["torchrun_env"]


def _env_int(name: str, default: int | None = None) -> int | None:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer; torchrun sets it") from None


def _env_in(name: str, value: int, low: int, high: int, why: str) -> None:
    if not low <= value <= high:
        raise ConfigError(f"{name}={value} is outside {low}..{high} ({why}); start with torchrun")


def torchrun_env(
    joined_rank: int | None = None, *, output_dir_given: bool = True
) -> tuple[int, int, int]:
    """``(WORLD_SIZE, RANK, LOCAL_RANK)`` of this process as ``torchrun`` sets them, checked
    before any rendezvous (a rank no process group can hold would wait there for torch's
    30-minute timeout): ``(1, 0, 0)`` without ``WORLD_SIZE``.

    Args:
        joined_rank: this process's rank in the process group it has joined already, None
            before it joins one (``RANK`` and the rendezvous variables are then required).
        output_dir_given: whether the run's ``output_dir=`` was given. The processes of one
            run share it (docs/cluster.md); without it each would make a time-stamped folder
            of its own, and a rank waited silently at the rendezvous.

    Raises:
        ConfigError: a value that is not an integer, ``WORLD_SIZE`` below 1, ``WORLD_SIZE`` > 1
            without ``RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` or ``output_dir=``, ``RANK``
            outside 0..WORLD_SIZE-1, a negative ``LOCAL_RANK``, ``MASTER_PORT`` outside
            1..65535.
    """
    world = _env_int("WORLD_SIZE", 1)
    if world < 1:
        raise ConfigError(
            f"WORLD_SIZE={world} must be at least 1 (the number of processes); start the "
            "processes with torchrun, or unset WORLD_SIZE to train in one process"
        )
    if world == 1:
        return 1, 0, 0
    if not output_dir_given:
        raise ConfigError(
            f"WORLD_SIZE={world}: the processes of a distributed run write one run folder; "
            "give output_dir=DIR (on a filesystem every node sees), the same on every process"
        )
    if joined_rank is None:
        missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
        if missing:
            raise ConfigError(
                f"WORLD_SIZE={world} but {', '.join(missing)} not set: start the processes "
                "with torchrun (docs/cluster.md), or unset WORLD_SIZE to train in one process"
            )
        _env_in("MASTER_PORT", _env_int("MASTER_PORT"), 1, 65535, "a TCP port")
    rank = _env_int("RANK", joined_rank)
    local = _env_int("LOCAL_RANK", 0)
    _env_in("RANK", rank, 0, world - 1, f"one rank per process, WORLD_SIZE={world}")
    _env_in("LOCAL_RANK", local, 0, world - 1, "the process's place on its node")
    return world, rank, local
