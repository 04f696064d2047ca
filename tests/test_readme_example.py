"""The README's own-model example ("Train your own model") runs as printed: its code block,
taken from README.md, trains a small model of its own on the tiny bank through
`curi.models.data.episode_dataset` and scores it with `curi.oracles.model_score.score_model`
beside the oracles, in a fresh process as a user would run it."""

from __future__ import annotations

import math
import re

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
