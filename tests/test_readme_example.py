"""The README's examples run as printed: the own-model example ("Train your own model"), taken
from README.md, trains a small model of its own on the tiny bank through
`curi.models.data.episode_dataset` and scores it with `curi.oracles.model_score.score_model`
beside the oracles, in a fresh process as a user would run it; the easiness example runs as
printed; and the README says what a new user meets (the shards of a tar export, the CPU build
of torch, lm-eval offline)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from conftest import readme_section, run_readme_scores

SECTION = "## Train your own model"


def own_model_code() -> str:
    """The one Python block of the README's own-model section."""
    section = readme_section(SECTION).split("\n### With a few-shot library", 1)[0]  # own test
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, f"expected one python block in {SECTION!r}, found {len(blocks)}"
    return blocks[0]


def test_own_model_example_trains_and_scores_beside_the_oracles(tiny_bank_dir, tmp_path):
    # The block as printed; the tiny bank of the test session is its `build_bank("tiny")`.
    stdout, scores = run_readme_scores(own_model_code(), tiny_bank_dir.parent, tmp_path)
    assert set(scores) == {"splits", "concepts"}
    assert [row["split"] for row in scores["splits"]] == ["concept_iid", "binding_color"]
    for row in scores["splits"]:
        assert {"map", "cba", "map_strong", "map_weak", "map_random", "cba_strong"} <= set(row)
        assert math.isfinite(row["map"]) and 0 < row["map"] <= 1
        assert math.isfinite(row["cba"]) and 0 <= row["cba"] <= 1
        assert row["map"] > row["map_random"], row  # the loop trained something
    assert scores["concepts"] and all(math.isfinite(c["map"]) for c in scores["concepts"])
    assert "concept_iid {'map'" in stdout  # the rows the README prints
    assert sorted(p.name for p in tiny_bank_dir.parent.iterdir() if p.is_dir()) == ["tiny"]


def test_the_easiness_example_runs_as_printed(tiny_bank_dir, monkeypatch, capsys):
    """It called `curi.easiness(train_concepts, test_concepts)` on names it never defined."""
    section = readme_section("## Which test concepts are hard? (unobserved local structures)")
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    monkeypatch.setenv("CURI_DATA_DIR", str(tiny_bank_dir.parent))  # its bank, already built
    names: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), names)
    n = len(names["test_concepts"])
    assert n > 0 and all(len(names[k]) == n for k in ("seed", "four", "nosib"))
    assert all(0 <= e <= 1 for e in names["seed"]) and min(names["seed"]) < 1
    assert capsys.readouterr().out.startswith(f"{n} test concepts, easiness ")


def test_the_readme_says_what_a_new_user_meets():
    """`out=X.tar` writes X-00000.tar, ... (`webdataset.WebDataset("X.tar")` fails); `pip
    install -e .` brings CUDA wheels on a machine without a GPU; offline, lm_eval retries the
    Hub for a minute without HF_HUB_OFFLINE=1."""
    use, setup = readme_section("## Use"), readme_section("## Set up")
    assert "`out=X.tar` writes WebDataset shards `X-00000.tar`" in use
    assert 'webdataset.WebDataset("X-{00000..00001}.tar")' in use
    assert "--index-url https://download.pytorch.org/whl/cpu" in setup
    assert setup.count("```bash") == 2  # still the two set-up commands
    lm_docs = (Path(__file__).resolve().parents[1] / "docs" / "lm.md").read_text()
    for text in (readme_section("## Language models"), lm_docs):
        assert "HF_HUB_OFFLINE=1" in text


# What a reader of the docs does not have: the tracker's issue numbers and the project's own
# source files for the papers (cite the paper and its section instead).
NOT_FOR_READERS = re.compile(
    r"\bissues? \d+|\(issue\b|\bissue-\d+|shared/|\bseeds/|\bspec/|\bseeds? 0\d\d\b|\bseed-0\d\d\b"
    r"|\bspec \d\b|(?-i:\b(?:CURI|DIVERGENCE|RULES)\.md\b)",
    re.I,
)


def test_the_docs_stand_alone():
    """README.md and docs/ cite neither issue numbers nor seed or spec files; the targets table
    of docs/benchmarks.md has no issue number after a target."""
    root = Path(__file__).resolve().parents[1]
    found = []
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            line = line.replace("=/shared/", "=/")  # a cluster's shared disk in examples
            if hit := NOT_FOR_READERS.search(line):
                found.append(f"{path.relative_to(root)}:{i}: {hit.group(0)!r}")
    assert not found, "\n".join(found)
    bench = (root / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    table = bench.split("## Targets at a glance", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("| ")]
    assert rows and rows[0].startswith("| target |"), rows[:1]
    assert not [r for r in rows if re.match(r"\| [^|]*\(\d+\) \|", r)]
