"""Progress where there is no terminal: `curi gap` run with stderr redirected (a batch job, a log
file) logs a line every `progress_every` seconds with the episodes done of the total, the rows done
and the time left, so a table that takes minutes does not look stuck (`curi.progress`)."""

from __future__ import annotations

import logging
import re

import pytest
from conftest import run_curi

from curi.errors import ConfigError
from curi.progress import progress_bar

LINE = re.compile(
    r"gap: (\d+)/(\d+) episodes \((\d+)%\), (\d+)/(\d+) rows, [\d:]+ elapsed, ETA ([\d:]+|\?)"
)


def test_without_a_bar_the_progress_goes_to_the_log(caplog):
    logger = logging.getLogger("curi.test_progress")
    with caplog.at_level(logging.INFO, logger="curi.test_progress"):
        with progress_bar(
            4, "gap", unit="episode", show=False, progress_every=1e-9, logger=logger
        ) as b:
            for rows in range(4):
                b.set_postfix_str(f"{rows}/4 rows", refresh=False)
                b.update(1)
    lines = [LINE.search(r.getMessage()) for r in caplog.records]
    assert all(lines) and len(lines) >= 4, caplog.text
    assert (lines[-1].group(1), lines[-1].group(2), lines[-1].group(3)) == ("4", "4", "100")


def test_zero_writes_no_line_and_a_bad_interval_is_refused(caplog):
    with caplog.at_level(logging.INFO), progress_bar(3, "x", show=False, progress_every=0) as b:
        b.update(3)
    assert not caplog.records
    for bad in (-1, float("inf"), "often"):
        with pytest.raises(ConfigError, match=r"^progress_every must be a number in \[0, "):
            progress_bar(3, "x", show=False, progress_every=bad)


def test_curi_gap_logs_rows_done_and_the_eta_when_stderr_is_not_a_terminal(tiny_bank_dir, tmp_path):
    out = tmp_path / "gap"
    args = ["bank=tiny", f"data_dir={tiny_bank_dir.parent}", "splits=[concept_iid,counting]"]
    args += ["negatives=[hard]", "episodes.test=2000", "workers=1", "progress_every=0.000001"]
    r = run_curi("gap", *args, f"output_dir={out}", cwd=tmp_path)  # stderr: a pipe
    assert r.returncode == 0, r.stderr[-3000:]
    assert "\r" not in r.stderr  # no bar drawn into the redirected stream
    found = [LINE.search(line) for line in (out / "gap.log").read_text().splitlines()]
    found = [m for m in found if m]
    done = [(int(m[1]), int(m[4])) for m in found]
    assert all(int(m[2]) == 4000 and int(m[5]) == 2 for m in found), found
    assert (2000, 1) in done and done[-1] == (4000, 2), done  # a row done of two, then both
    assert any(m[6] != "?" for m in found if 0 < int(m[1]) < 4000)  # an ETA within the table


def test_progress_every_is_checked_before_any_work(tmp_path):
    r = run_curi(
        "gap", "bank=tiny", "progress_every=-5", f"data_dir={tmp_path / 'none'}", cwd=tmp_path
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "curi gap: error: progress_every must be a number in [0, inf], got -5"
    ], r.stderr
