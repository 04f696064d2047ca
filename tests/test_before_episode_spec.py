"""Folders made by curi before the episodes took an `EpisodeSpec` (issue 45 item 3) go on with
today's code: the settings a gap table and a sharded export record kept their keys and values.

tests/data/before_episode_spec/ was written by the code before that change (commit bb18e43,
run from a worktree of it on the `tiny` bank): a gap table stopped after its first row
(``gap/``: ``curi gap bank=tiny splits=[concept_iid] negatives=[hard,easy] episodes.test=30``,
``gap_whole.json`` the whole table of that run) and the settings and first part of a sharded
export whose second job failed (``export/``: counting, test, easy negatives, seed 3, 5
episodes in 2 jobs, the bank's folder and manifest digest written ``@BANK@`` and
``@MANIFEST@``: they name that bank's copy, not the episodes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import curi.export.write
from curi.cli import main
from curi.errors import CuriError
from curi.export import export_episodes
from curi.export.parts import digest, staging_folder
from curi.splits import make_split

DATA = Path(__file__).parent / "data" / "before_episode_spec"
TIMINGS = ("seconds", "stage_seconds")


def _values(row: dict) -> dict:
    """A row less its timings, its divergences to 1e-12 (as tests/test_expected.py)."""
    out = {k: v for k, v in row.items() if k not in TIMINGS}
    for k in ("d_compound", "d_compound_random"):
        if k in out:
            out[k] = pytest.approx(out[k], rel=1e-12)
    return out


def test_a_gap_table_from_before_is_finished(tiny_bank_dir, tmp_path):
    out = tmp_path / "gap"
    shutil.copytree(DATA / "gap", out)
    kept = json.loads((out / "gap.json").read_text())
    main(
        [
            "gap",
            "bank=tiny",
            f"data_dir={tiny_bank_dir.parent}",
            "splits=[concept_iid]",
            "negatives=[hard,easy]",
            "episodes.test=30",
            "workers=1",
            "progress=false",
            f"output_dir={out}",
        ]
    )
    rows = json.loads((out / "gap.json").read_text())
    assert rows[0] == kept[0]  # kept as written (its time too): the settings were the same
    whole = json.loads((DATA / "gap_whole.json").read_text())
    assert [_values(r) for r in whole] == [
        {k: v for k, v in r.items() if k not in TIMINGS} for r in rows
    ]
    assert not (out / "gap.partial").exists()


def _export(bank, out: Path) -> dict:
    split = make_split(bank, "counting")
    kw = {"n": 5, "shard_size": 2, "progress": False, "negatives": "easy", "seed": 3}
    return export_episodes(bank, split, "test", out, jobs=2, **kw)


def test_a_sharded_export_from_before_is_resumed(tiny_bank, tmp_path, monkeypatch):
    """Today's export of the same options, stopped as that one was, writes the same settings
    (so the same staging folder: an export stopped before this change is resumed, its
    finished part kept) and the same first part; run again, it writes the missing part only
    and publishes the export one job writes."""
    old = json.loads((DATA / "export" / "settings.json").read_text())
    old["bank"] = str(Path(tiny_bank.path).resolve())  # where this bank is, and its build
    old["bank_manifest"] = tiny_bank.manifest.get("manifest_sha256")
    old_done = json.loads((DATA / "export" / "part-00000.done").read_text())
    real, written = curi.export.write._export_range, []

    def job(*args):
        written.append(args[-1].number)
        if args[-1].number == 1 and len(written) < 3:
            raise RuntimeError("killed")
        return real(*args)

    monkeypatch.setattr(curi.export.write, "_export_range", job)
    out = tmp_path / "jobs" / "eps.tar"
    with pytest.raises(CuriError, match="part-00001"):
        _export(tiny_bank, out)
    (folder,) = [p for p in staging_folder(out).iterdir() if not p.name.startswith(".")]
    assert json.loads((folder / "settings.json").read_text()) == old
    assert folder.name == digest(old)
    done = json.loads((folder / "part-00000.done").read_text())
    assert list(done["files"].values()) == list(old_done["files"].values())  # bytes, SHA-256
    assert [done[k] for k in ("start", "stop", "episodes")] == [0, 2, 2]
    result = _export(tiny_bank, out)
    assert written == [0, 1, 1]  # the finished part was kept
    monkeypatch.setattr(curi.export.write, "_export_range", real)
    split = make_split(tiny_bank, "counting")
    single = export_episodes(
        tiny_bank,
        split,
        "test",
        tmp_path / "one" / "eps.tar",
        n=5,
        shard_size=2,
        progress=False,
        negatives="easy",
        seed=3,
    )
    assert [p.read_bytes() for p in result["files"]] == [p.read_bytes() for p in single["files"]]
