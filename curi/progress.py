"""Progress of long work where someone can see it: a tqdm bar on a terminal, or, when there is
none (a batch job, stderr redirected to a file), a line in the log every `progress_every`
seconds with the count done, the total, what the caller adds (rows done) and the time left, so
a job that runs for minutes does not look stuck."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from curi import validate

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["LOG_FORMAT", "progress_bar"]

log = logging.getLogger("curi")

# One log line of progress: "gap: 3000/36000 episodes (8%), 2/18 rows, 00:10 elapsed, ETA 01:50"
LOG_FORMAT = (
    "{desc}: {n_fmt}/{total_fmt} {unit}s ({percentage:.0f}%){postfix}, {elapsed} elapsed, "
    "ETA {remaining}"
)


class _LogLines:
    """A file for tqdm that hands each line it draws to a logger (tqdm redraws a line with
    carriage returns and padding; the log gets the text alone)."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger

    def write(self, text: str) -> None:
        line = text.strip("\r\n ")
        if line:
            self.logger.info(line)

    def flush(self) -> None:
        pass


def progress_bar(
    total: int,
    desc: str,
    *,
    unit: str = "it",
    show: bool = True,
    progress_every: float = 0.0,
    logger: logging.Logger | None = None,
    **options,
) -> tqdm:
    """A tqdm bar over `total` items: drawn on stderr with `show`; else, with `progress_every` > 0,
    written to `logger` (default: the ``curi`` logger) as `LOG_FORMAT` lines, at most one per
    `progress_every` seconds, the first after `progress_every` seconds; else silent. `options` go to
    tqdm (``smoothing``).

    Raises:
        ConfigError: `progress_every` negative, infinite or not a number.
    """
    from tqdm import tqdm

    progress_every = validate.number(progress_every, "progress_every", low=0)
    if show or not progress_every:
        return tqdm(total=total, desc=desc, unit=unit, disable=not show, **options)
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=_LogLines(logger or log),
        mininterval=progress_every,
        delay=progress_every,  # no line at 0 %: the first after `progress_every` seconds
        miniters=1,  # look at the clock at every update: updates are whole chunks of work
        leave=False,  # no repeat of the last line at the end (the caller logs the result)
        bar_format=LOG_FORMAT,
        **options,
    )
