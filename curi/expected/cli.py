"""`curi check`: the one line of `curi.expected.check_installation` (exit status 0 when this
installation makes the stored numbers, 1 when something moved)."""

from __future__ import annotations

import logging
import sys

from omegaconf import DictConfig

__all__ = ["check"]


def check(cfg: DictConfig) -> None:
    """Compare the banks and episodes this installation makes with the stored numbers."""
    from curi.expected.check import check_installation, summary

    banks = ("tiny", "default") if cfg.default_bank else ("tiny",)
    logger = logging.getLogger("curi")  # the bank builds' lines: the answer is one line
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        result = check_installation(banks, progress=bool(cfg.progress))
    finally:
        logger.setLevel(level)
    print(f"curi check: {summary(result)}", flush=True)
    if not result.ok:
        sys.exit(1)
