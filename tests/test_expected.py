"""The stored expected numbers (`curi/expected/`, docs/design.md "Stored expected numbers"):
today's banks, episodes (reference, batched and export paths) and gap row are the stored ones,
the wheel ships the files, and `curi check` says in one line that they are equal, or what moved
(exit 1)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from fnmatch import fnmatch
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest

from curi import build_bank, load_bank
from curi.errors import ConfigError
from curi.expected import check as check_module
from curi.expected.check import CheckResult, check_installation, expected_record, summary
from curi.expected.compare import compare_bank, compare_gap_row, compare_record
from curi.expected.generate import GAP, expected_from, gap_expected
from curi.expected.measure import CASES, EXPORT_EPISODES, PATHS, SEEDS, bank_record

REPO = Path(__file__).resolve().parents[1]
STORED = ("tiny.json", "default.json", "gap_tiny.json")


def _stored_part(record: dict) -> dict:
    """A record without what is only information (the versions that made it)."""
    return {k: v for k, v in record.items() if k != "made_with"}


def _same_as_stored(name: str, observed: dict, bank: str) -> None:
    """`observed` (`bank_record`) equals the stored record `name`: first what moved, in
    words, then every key of the record the generator would store from it."""
    stored = expected_record(name)
    assert compare_record(stored, observed, bank=bank) == []
    assert _stored_part(expected_from(observed)) == _stored_part(stored)


# --- the wheel ships them ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unpacked_wheel(wheel, tmp_path_factory) -> Path:
    """The wheel built from the checkout's files (conftest's `wheel`), unpacked: an
    installation without the checkout."""
    out = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(out)
    return out


def test_the_stored_files_are_package_data_of_the_wheel(unpacked_wheel):
    here = sorted(p.name for p in (REPO / "curi" / "expected").glob("*.json"))
    assert set(STORED) <= set(here)
    installed = files("curi.expected")
    assert all(installed.joinpath(name).is_file() for name in here)
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    assert "curi.expected" in setuptools["packages"]
    patterns = setuptools["package-data"]["curi.expected"]
    assert all(any(fnmatch(name, p) for p in patterns) for name in here)
    shipped = unpacked_wheel / "curi" / "expected"
    for name in here:
        assert (shipped / name).read_bytes() == (REPO / "curi" / "expected" / name).read_bytes()


def test_curi_check_passes_from_the_wheel(unpacked_wheel, tmp_path):
    """`curi check` of an installation made from the wheel alone (its files first on the path),
    run outside the checkout: exit 0 and one line saying the episodes are equal."""
    code = (
        "import sys, curi\nprint(curi.__file__, file=sys.stderr)\n"
        "from curi.cli import main\nmain()\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "check"],
        cwd=tmp_path,
        env={
            **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            "PYTHONPATH": str(unpacked_wheel),
        },
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert Path(r.stderr.splitlines()[0]).is_relative_to(unpacked_wheel), r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("curi check: equal: "), r.stdout
    assert list(tmp_path.iterdir()) == []  # the temporary bank is gone, no run folder


# --- today's numbers are the stored ones ----------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_record(tiny_bank, tmp_path_factory) -> dict:
    """The tests' tiny bank (built with one worker; the preset with one per core) and every
    path's episodes of every stored stream, measured."""
    return bank_record(tiny_bank, tmp_path_factory.mktemp("episodes"))


def test_the_tiny_bank_and_its_episodes_are_the_stored_ones(tiny_record):
    _same_as_stored("tiny", tiny_record, "tiny")


@pytest.fixture(scope="module")
def default_bank(tmp_path_factory):
    """The default bank (about 25 s on 2 cores), built once for this module."""
    return load_bank(build_bank("default", tmp_path_factory.mktemp("data"), progress=False))


def test_the_default_bank_and_its_episodes_are_the_stored_ones(default_bank, tmp_path):
    _same_as_stored("default", bank_record(default_bank, tmp_path), "default")


def test_the_gap_row_is_the_stored_one(tiny_bank, tmp_path):
    from curi.oracles import compositionality_gap

    stored = expected_record("gap_tiny")
    assert {k: stored[k] for k in GAP} == GAP
    (row,) = compositionality_gap(
        tiny_bank,
        GAP["split"],
        GAP["negatives"],
        episodes=GAP["episodes"],
        seed=GAP["seed"],
        workers=1,
        progress=False,
    )
    assert compare_gap_row(stored["row"], row) == []
    (tmp_path / "gap.json").write_text(json.dumps([row]))  # as `curi gap` writes it
    assert compare_gap_row(stored["row"], gap_expected(tmp_path / "gap.json")["row"]) == []


# --- what the comparisons tell apart ---------------------------------------------------------
def test_gap_rows_compare_exactly_but_the_compound_divergences():
    row = expected_record("gap_tiny")["row"]
    near = {**row, "d_compound": row["d_compound"] * (1 + 1e-14)}
    assert compare_gap_row(row, near) == []
    far = {**row, "d_compound_random": row["d_compound_random"] * (1 + 1e-11)}
    assert [m.split(" ")[3] for m in compare_gap_row(row, far)] == ["d_compound_random"]
    for key in ("map_weak", "cba_pooled_strong", "d_atom"):  # one ulp is a move
        moved = compare_gap_row(row, {**row, key: float(np.nextafter(row[key], 1.0))})
        assert len(moved) == 1 and moved[0].startswith(f"gap row moved: {key} "), moved
    assert compare_gap_row(row, {**row, "n_test": row["n_test"] + 1}) != []
    assert compare_gap_row(row, {**row, "seconds": 99.0}) == []


def test_other_bytes_around_the_same_arrays_are_told_apart_from_a_moved_bank():
    stored = expected_record("tiny")["bank"]
    other = copy.deepcopy(stored)
    other["files"]["concepts.npz"]["sha256"] = "0" * 64  # same arrays, zipped otherwise
    other["files"]["truth.npy"]["content"] = "0" * 64
    other["counts"]["concepts"] += 1
    del other["files"]["eval_ids.npy"]
    (line,) = compare_bank(stored, other)
    assert line == (
        "bank moved: concepts.npz (same arrays, other file bytes), eval_ids.npy (missing), "
        f"truth.npy, manifest counts.concepts {stored['counts']['concepts']} -> "
        f"{stored['counts']['concepts'] + 1}"
    )


def test_the_generator_stores_nothing_when_a_path_differs():
    stream = {"episodes": ["a", "b"], "first": [], "alternates": "x", "export": "y"}
    paths = {p: dict(stream) for p in PATHS}
    paths["stacked"] = {**stream, "episodes": ["a", "c"]}
    observed = {"bank": {}, "split": {}, "streams": {"hard": {"0": paths}}}
    with pytest.raises(ConfigError, match="hard seed 0: stacked differs from the reference"):
        expected_from(observed)


# --- curi check ----------------------------------------------------------------------------------
def _tampered() -> dict:
    """A copy of the stored tiny record with three things moved: the truth matrix, episode 5
    of a hard stream, and the concept of episode 0 of an easy stream."""
    record = copy.deepcopy(expected_record("tiny"))
    record["bank"]["files"]["truth.npy"]["content"] = "0" * 64
    record["streams"]["hard"]["0"]["episodes"][5] = "0" * 12
    easy = record["streams"]["easy"]["1"]
    easy["episodes"][0] = "0" * 12
    easy["first"][0]["concept"] += 1
    return record


def test_curi_check_says_what_moved_in_one_line_and_exits_1(monkeypatch, tmp_path, capsys):
    from curi.cli import main

    monkeypatch.setattr(check_module, "expected_record", lambda name: _tampered())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["check"])
    assert e.value.code == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0] == (
        "curi check: moved: bank moved: truth.npy; "
        "episodes moved: concept_iid/hard seed 0 reference (episode 5); "
        "episodes moved: concept_iid/hard seed 0 stacked (episode 5); and 4 more"
    )
    assert list(tmp_path.iterdir()) == []


def test_every_path_that_moved_is_listed(tiny_record):
    assert EXPORT_EPISODES > 5  # the export path's episodes include episode 5
    moved = compare_record(_tampered(), tiny_record)
    assert moved == [
        "bank moved: truth.npy",
        "episodes moved: concept_iid/hard seed 0 reference (episode 5)",
        "episodes moved: concept_iid/hard seed 0 stacked (episode 5)",
        "episodes moved: concept_iid/hard seed 0 export (episode 5)",
        "episodes moved: concept_iid/easy seed 1 reference (episode 0: concept)",
        "episodes moved: concept_iid/easy seed 1 stacked (episode 0: concept)",
        "episodes moved: concept_iid/easy seed 1 export (episode 0: concept)",
    ]
    assert compare_record(_tampered(), tiny_record, bank="default")[0] == (
        "default: bank moved: truth.npy"
    )
    result = CheckResult(moved, ("tiny",))
    assert not result.ok and summary(result).endswith("(episode 5); and 4 more")


def test_check_refuses_a_bank_without_stored_numbers():
    with pytest.raises(ConfigError, match="no stored numbers for the bank 'paper'"):
        check_installation(["paper"])


def test_the_stored_streams_are_every_case_and_seed():
    for name in ("tiny", "default"):
        streams = expected_record(name)["streams"]
        assert sorted(streams) == sorted(CASES)
        assert all(sorted(s) == sorted(str(x) for x in SEEDS) for s in streams.values())
