"""The README's easyfsl recipe ("Train your own model", the block after `MARKER`) runs as
printed: easyfsl's `PrototypicalNetworks` trained on `episode_dataset` (one curi episode = one
2-way task) and scored with `curi.models.score_in_modality`'s embedding path, on the tiny bank, in a
fresh process as a user would run it. easyfsl is in the test extra."""

from __future__ import annotations

import math
import re

from conftest import readme_section, run_readme_scores

SECTION = "## Train your own model"
MARKER = "<!-- easyfsl recipe: tests/test_easyfsl_recipe.py runs this block -->"


def easyfsl_code() -> str:
    """The fenced block right after `MARKER` in the README's own-model section."""
    section = readme_section(SECTION)
    assert section.count(MARKER) == 1, f"expected one {MARKER!r} in {SECTION!r}"
    block = re.match(r"\s*```py(?:thon)?\n(.*?)```", section.split(MARKER, 1)[1], re.S)
    assert block, f"no fenced Python block right after {MARKER!r}"
    return block.group(1)


def test_the_easyfsl_recipe_trains_and_scores_beside_the_oracles(tiny_bank_dir, tmp_path):
    code = easyfsl_code()
    assert "from easyfsl" in code and "score_in_modality(" in code  # the recipe, not another block
    # The tiny bank of the test session is the recipe's `build_bank("tiny")` in this data dir.
    stdout, scores = run_readme_scores(code, tiny_bank_dir.parent, tmp_path)
    assert set(scores) == {"splits", "concepts"}
    assert [row["split"] for row in scores["splits"]] == ["concept_iid", "binding_color"]
    for row in scores["splits"]:
        assert row["episodes"] == 100  # score_in_modality's default number of episodes
        assert {"map", "cba", "map_strong", "map_weak", "map_random", "cba_strong"} <= set(row)
        assert math.isfinite(row["map"]) and 0 < row["map"] <= 1
        assert math.isfinite(row["cba"]) and 0 <= row["cba"] <= 1
        assert row["map"] > row["map_random"], row  # the easyfsl model learnt something
    assert scores["concepts"] and all(math.isfinite(c["map"]) for c in scores["concepts"])
    assert sum(c["episodes"] for c in scores["concepts"]) == 200  # every episode, by concept
    assert "concept_iid {'map'" in stdout  # the rows the README prints
