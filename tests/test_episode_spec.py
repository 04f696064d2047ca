"""`curi.episodes.EpisodeSpec`: its fields checked when it is made, its checks against a bank,
and the one way in for internal code (an AST scan of every function's options)."""

import ast
from pathlib import Path

import pytest

from curi import ConfigError
from curi.episodes import NEGATIVE_SAMPLERS, QUERY_NEGATIVES, EpisodeSampler, EpisodeSpec
from curi.errors import OptionError

ROOT = Path(__file__).resolve().parent.parent
#: The options that define an episode stream: a function taking three or more of them carries
#: a stream loose instead of an `EpisodeSpec`.
LOOSE = {"subset", "negatives", "query_negatives", "negative_sampler", "seed", "episodes"}
#: The public entry points, which keep their keyword arguments and build the spec: the
#: samplers of the public API, and the library function behind each command.
PUBLIC = {
    "curi/episodes/sampler.py": {"EpisodeSampler.__init__"},
    "curi/tasks/sampler.py": {"RuleTaskSampler.__init__"},
    "curi/export/write.py": {"export_episodes"},
    "oracles/gap.py": {"compositionality_gap"},
    "oracles/audit.py": {"run_audit"},
    "oracles/model_score.py": {"model_predictions", "score_arrays", "score_model"},
    "models/scoring.py": {"model_predictions", "score_in_modality"},
    "models/data.py": {"episode_dataset"},
    "models/evaluate.py": {"evaluate_checkpoint"},
    "models/difficulty_report.py": {"difficulty_report"},
    "models/lm/export.py": {"export_tasks"},
}


def _loose_functions(root: Path = ROOT) -> list[str]:
    """``path:Class.function`` of every function of the layers taking three or more `LOOSE`
    options, public entry points aside."""
    found = []
    for folder in ("curi", "oracles", "models", "renderers"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text())
            owner = {
                id(f): f"{c.name}."
                for c in ast.walk(tree)
                if isinstance(c, ast.ClassDef)
                for f in c.body
            }
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                a = node.args
                names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
                name = owner.get(id(node), "") + node.name
                allowed = PUBLIC.get(rel, set())
                if len(names & LOOSE) >= 3 and name not in allowed:
                    found.append(f"{rel}:{name}")
    return found


def test_internal_functions_take_the_spec_not_loose_options():
    assert _loose_functions() == []


def test_the_scan_finds_loose_options(tmp_path):
    """The scan sees a function or method carrying three options loose, not two, and not a
    public entry point; every public entry point named exists."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "data.py").write_text(
        "def f(bank, subset, negatives, *, seed=0): pass\n"
        "def g(bank, spec, *, seed=0, subset='train'): pass\n"
        "def episode_dataset(bank, subset, negatives, seed): pass\n"
        "class S:\n    def __init__(self, negatives, episodes, query_negatives): pass\n"
    )
    assert _loose_functions(tmp_path) == ["models/data.py:f", "models/data.py:S.__init__"]
    for rel, names in PUBLIC.items():
        src = (ROOT / rel).read_text()
        for name in names:
            cls, _, func = name.rpartition(".")
            assert f"def {func}(" in src and (not cls or f"class {cls}" in src), name


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("negatives", "hardd", "negatives must be one of hard, easy"),
        ("negative_sampler", "matchd", "negative_sampler must be one of paper, matched"),
        ("query_negatives", "rnd", "query_negatives must be one of hard, easy, random"),
        ("subset", "tests", "subset must be one of train, val, test"),
        ("seed", -1, "seed must be an integer in"),
        ("seed", 1.5, "seed must be an integer in"),
        ("size", 0, "size must be an integer in"),
        ("num_positives", 0, "num_positives must be an integer in"),
        ("num_negatives", "5", "num_negatives must be an integer in"),
    ],
)
def test_fields_are_checked_when_the_spec_is_made(field, value, words):
    """One line naming the field and its valid values, before any bank is opened (none is
    given), the same from the library's sampler."""
    with pytest.raises(ConfigError, match=words) as made:
        EpisodeSpec(**{"split": "concept_iid", "subset": "train", field: value})
    assert "\n" not in str(made.value)
    kw = {"negatives": "hard", "seed": 0, field: value}
    subset = kw.pop("subset", "train")
    with pytest.raises(ConfigError) as sampled:
        EpisodeSampler(object(), "concept_iid", subset, **kw)  # no bank work before the check
    assert str(sampled.value) == str(made.value)


def test_closed_sets_are_declared_beside_the_spec():
    assert NEGATIVE_SAMPLERS == ("paper", "matched")
    assert QUERY_NEGATIVES == ("hard", "easy", "random")
    with pytest.raises(OptionError, match="did you mean 'matched'"):
        EpisodeSpec("concept_iid", "train", negative_sampler="matchd")


def test_defaults_and_replace():
    spec = EpisodeSpec("concept_iid", "val", "easy", seed=3)
    assert (spec.query_negatives, spec.size, spec.negative_sampler) == ("easy", 5_000, "paper")
    assert spec.replace(size=7).size == 7 and spec.size == 5_000
    with pytest.raises(ConfigError, match="seed"):
        spec.replace(seed=-2)
    with pytest.raises(AttributeError):
        spec.seed = 4  # frozen


def test_check_against_the_bank(tiny_bank):
    """`check` resolves the split and refuses sizes the bank cannot supply, in one line."""
    spec = EpisodeSpec("concept_iid", "train", seed=1)
    checked = spec.check(tiny_bank)
    assert checked.split.name == "concept_iid" and checked.check(tiny_bank) is checked
    with pytest.raises(ConfigError, match=r"num_positives must be an integer in \[1, "):
        spec.replace(num_positives=10**6).check(tiny_bank)
    with pytest.raises(ConfigError, match=r"num_negatives must be an integer in \[1, "):
        spec.replace(num_negatives=10**7).check(tiny_bank)


def test_a_sampler_from_the_spec_equals_the_keyword_one(tiny_bank):
    spec = EpisodeSpec("concept_iid", "test", "hard", seed=5, negative_sampler="matched")
    a = EpisodeSampler.from_spec(tiny_bank, spec)
    b = EpisodeSampler(tiny_bank, "concept_iid", "test", "hard", 5, negative_sampler="matched")
    assert a.spec == b.spec.replace(split=a.spec.split)
    for i in (0, 7):
        assert (a[i].support_ids == b[i].support_ids).all()
        assert (a[i].query_ids == b[i].query_ids).all()
