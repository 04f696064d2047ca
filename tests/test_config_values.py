"""Config values are typed and bounded: every absurd value of the reliability audit
(docs/reliability.md, defect 5) ends in one ConfigError naming the key, the value and the allowed
range, before any work starts; and every shipped config still validates."""

from __future__ import annotations

import pytest
from conftest import run_curi
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from curi import BankConfig, EpisodeSampler, make_split, validate
from curi.errors import ConfigError, SplitError
from curi.export import export_episodes
from curi.presets import list_presets
from curi.splits.spec import SplitSpec

RANGE = "must be an integer in"


@pytest.fixture(autouse=True)
def no_work(monkeypatch):
    """A bad value must be refused before any episode is built or any oracle set up: on the
    code before the fix these calls would loop forever, fill the disk or ask for terabytes,
    so they fail here at once instead."""
    from curi.oracles.eval_set import EvalSet

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the config values were checked")

    monkeypatch.setattr(EpisodeSampler, "__getitem__", refuse)
    monkeypatch.setattr(EvalSet, "from_bank", refuse)


# --- the helpers ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, ok",
    [
        (0, 0),
        (7, 7),
        (2.0, 2),
        (True, None),
        (1.5, None),
        ("3", None),
        (-1, None),
        (11, None),
        (float("nan"), None),
        (None, None),
    ],
)
def test_integer(value, ok):
    if ok is None:
        with pytest.raises(ConfigError, match=r"^x must be an integer in \[0, 10\], got "):
            validate.integer(value, "x", low=0, high=10)
    else:
        got = validate.integer(value, "x", low=0, high=10)
        assert got == ok and type(got) is int


@pytest.mark.parametrize("value", [0, -1e-3, float("inf"), float("nan"), True, "1e-3", 11])
def test_number_refuses(value):
    with pytest.raises(ConfigError, match=r"^lr must be a number in \(0, 10\], got "):
        validate.number(value, "lr", low=0, high=10, open_low=True)


def test_choice_names_the_options():
    with pytest.raises(ConfigError, match="negatives must be one of hard, easy, got 'x'"):
        validate.choice("x", "negatives", ("hard", "easy"))


# --- the audit's cases, at the API ---------------------------------------------------------
def _sampler(bank, **kw):
    return EpisodeSampler(bank, "concept_iid", "test", **kw)


def _export(bank, tmp_path, **kw):
    kw = {"n": 3, **kw}
    return export_episodes(
        bank, make_split(bank, "concept_iid"), "test", tmp_path / "e.jsonl", progress=False, **kw
    )


def _gap(bank, **kw):
    from curi.oracles import compositionality_gap

    return compositionality_gap(bank, "concept_iid", "hard", progress=False, **kw)


def compositionality_gap(bank, splits, negatives):
    from curi.oracles import compositionality_gap as gap

    return gap(bank, splits, negatives, progress=False, episodes=2, workers=1)


def _gap_negatives(bank, negatives):
    return compositionality_gap(bank, "concept_iid", negatives)


def _train(**kw):
    from curi.models.config import TrainSettings

    return TrainSettings.from_mapping(kw)


def _run(**kw):
    from curi.models.config import RunConfig

    return RunConfig.from_mapping({"bank": {"name": "tiny"}, **kw})


def _eval(**kw):
    from curi.models.config import check_eval_options

    opts = {"episodes": 10, "seed": 0, "batch_size": None, "num_workers": 0, "chunk": 512}
    return check_eval_options(**{**opts, **kw})


API_CASES = [
    # EpisodeSampler(num_negatives=19000) looped forever
    ("sampler", lambda b, t: _sampler(b, num_negatives=19_000), "num_negatives " + RANGE),
    ("sampler", lambda b, t: _sampler(b, num_negatives=0), "num_negatives " + RANGE),
    ("sampler", lambda b, t: _sampler(b, num_positives=0), "num_positives " + RANGE),
    ("sampler", lambda b, t: _sampler(b, num_positives=10**6), "num_positives " + RANGE),
    ("sampler", lambda b, t: _sampler(b, size=0), "size " + RANGE),
    ("sampler", lambda b, t: _sampler(b, size=10**12), "size " + RANGE),
    ("sampler", lambda b, t: _sampler(b, seed=-1), "seed " + RANGE),  # was ValueError
    ("sampler", lambda b, t: _sampler(b, seed=1.5), "got 1.5"),  # was truncated to 1
    ("sampler", lambda b, t: _sampler(b, seed=True), "got True"),
    # curi episodes: n=10**12 filled the disk, n=-1 wrote an empty file, shard_size=0
    ("export", lambda b, t: _export(b, t, n=10**12), "n " + RANGE),
    ("export", lambda b, t: _export(b, t, n=-1), "n " + RANGE),
    ("export", lambda b, t: _export(b, t, n=0), "n " + RANGE),
    ("export", lambda b, t: _export(b, t, n=2.5), "got 2.5"),
    ("export", lambda b, t: _export(b, t, shard_size=0), "shard_size " + RANGE),
    ("export", lambda b, t: _export(b, t, seed=-1), "seed " + RANGE),
    ("export", lambda b, t: _export(b, t, seed=0.5), "seed " + RANGE),
    # gap: episodes.test=10**12 asked for 7 TiB, episodes.test=0 wrote a table of NaNs
    ("gap", lambda b, t: _gap(b, episodes=10**12), "episodes.test " + RANGE),
    ("gap", lambda b, t: _gap(b, episodes=0), "episodes.test " + RANGE),
    ("gap", lambda b, t: _gap(b, workers=-1), "workers " + RANGE),
    ("gap", lambda b, t: _gap(b, seed=-1), "seed " + RANGE),
    ("gap", lambda b, t: _gap(b, seed=2.5), "seed " + RANGE),
    # gap: prior=foo failed in a worker after the bank loaded, splits=[] after the eval set
    ("gap", lambda b, t: _gap(b, prior="foo"), "prior must be one of"),
    ("gap", lambda b, t: _gap(b, likelihood="foo"), "likelihood must be one of"),
    ("gap", lambda b, t: compositionality_gap(b, [], "hard"), "give at least one split"),
    ("gap", lambda b, t: compositionality_gap(b, "boolean", []), "give at least one split"),
    ("gap", lambda b, t: _gap_negatives(b, ["hard", "hrd"]), "negatives must be one of"),
    # train: batch_size=0 silently became 64, embed_dim=0 trained at loss ln 2
    ("train", lambda b, t: _train(batch_size=0), "train.batch_size " + RANGE),
    ("train", lambda b, t: _train(batch_size=2.5), "train.batch_size " + RANGE),
    ("train", lambda b, t: _train(batch_size_by_modality={"schema": 0}), "modality.schema"),
    ("train", lambda b, t: _train(lr=0), "train.lr must be a number in (0, 10]"),
    ("train", lambda b, t: _train(lr_by_modality={"schema": -1}), "lr_by_modality.schema"),
    ("train", lambda b, t: _train(steps=0), "train.steps " + RANGE),
    ("train", lambda b, t: _train(steps=1.5), "train.steps " + RANGE),
    ("train", lambda b, t: _train(eval_batch_size=0), "train.eval_batch_size " + RANGE),
    ("train", lambda b, t: _train(num_workers=-1), "train.num_workers " + RANGE),
    ("train", lambda b, t: _train(alpha=float("nan")), "train.alpha must be a number"),
    ("train", lambda b, t: _train(grad_clip=0), "train.grad_clip must be a number"),
    ("train", lambda b, t: _run(embed_dim=0), "embed_dim " + RANGE),
    ("train", lambda b, t: _run(seed=-1), "seed " + RANGE),
    ("train", lambda b, t: _run(seed=1.5), "seed " + RANGE),
    ("train", lambda b, t: _run(negatives="medium"), "negatives must be one of"),
    ("eval", lambda b, t: _eval(batch_size=0), "batch_size " + RANGE),
    ("eval", lambda b, t: _eval(num_workers=-1), "num_workers " + RANGE),
    ("eval", lambda b, t: _eval(chunk=0), "chunk " + RANGE),
    ("eval", lambda b, t: _eval(seed=-1), "seed " + RANGE),
    # bank: image_width=0 gave location bin 0; max_depth=-1 or attempts=0 built 0 concepts
    ("bank", lambda b, t: BankConfig.preset("tiny", image_width=0), "bank.image_width " + RANGE),
    ("bank", lambda b, t: BankConfig.preset("tiny", image_height=-1), "bank.image_height"),
    ("bank", lambda b, t: BankConfig.preset("tiny", max_depth=-1), "bank.max_depth " + RANGE),
    ("bank", lambda b, t: BankConfig.preset("tiny", max_depth=3), "bank.max_depth " + RANGE),
    ("bank", lambda b, t: BankConfig.preset("tiny", max_depth=66), "bank.max_depth " + RANGE),
    ("bank", lambda b, t: BankConfig.preset("tiny", attempts=0), "bank.attempts " + RANGE),
    ("bank", lambda b, t: BankConfig.preset("tiny", seed=-1), "bank.seed " + RANGE),
    ("bank", lambda b, t: BankConfig.preset("tiny", seed=1.5), "bank.seed " + RANGE),
    ("bank", lambda b, t: BankConfig.preset("tiny", num_scenes=10**12), "bank.num_scenes"),
    ("bank", lambda b, t: BankConfig.preset("tiny", num_draws=10**12), "bank.num_draws"),
    ("bank", lambda b, t: BankConfig.preset("tiny", workers=-1), "bank.workers " + RANGE),
    ("bank", lambda b, t: BankConfig.preset("tiny", min_positives=5000), "leaves no concept"),
    ("bank", lambda b, t: BankConfig.preset("tiny", max_fraction=float("nan")), "max_fraction"),
    # split: seed=-1 failed later with ValueError, a non-integer seed was truncated
    ("split", lambda b, t: SplitSpec("s", "random_groups", seed=-1), "seed " + RANGE),
    ("split", lambda b, t: SplitSpec("s", "random_groups", seed=1.5), "got 1.5"),
    (
        "split",
        lambda b, t: make_split(b, {"name": "r", "rule": "random_groups", "seed": -3}),
        "got -3",
    ),
]


@pytest.mark.parametrize(
    "what, call, message", API_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(API_CASES)]
)
def test_bad_value_is_one_clear_error(what, call, message, tiny_bank, tmp_path):
    error = SplitError if what == "split" else ConfigError
    with pytest.raises(error) as e:
        call(tiny_bank, tmp_path)
    assert message in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "e.jsonl").exists()


def test_valid_values_are_kept_as_ints(tiny_bank):
    from curi.export import check_export_options

    assert BankConfig.preset("tiny", seed=2.0).seed == 2
    assert type(BankConfig.preset("tiny", seed=2.0).seed) is int
    s = _sampler(tiny_bank, seed=3.0, num_negatives=100, size=5)
    assert (s.seed, s.num_negatives, len(s)) == (3, 100, 5)
    assert check_export_options(10, 4, 0) == (10, 4, 0)


# --- every shipped config still validates --------------------------------------------------
@pytest.mark.parametrize("name", list_presets("bank"))
def test_bank_presets_validate(name):
    BankConfig.preset(name).check()


@pytest.mark.parametrize("preset", list_presets("train"))
@pytest.mark.parametrize("modality", list_presets("modality"))
def test_train_presets_validate(preset, modality):
    from curi.models.cli import RUN_KEYS
    from curi.models.config import RunConfig

    with initialize_config_module("curi.conf", version_base="1.3"):
        cfg = compose("train", overrides=[f"train={preset}", f"modality={modality}"])
    c = OmegaConf.to_container(cfg)
    run = RunConfig.from_mapping({k: c[k] for k in RUN_KEYS})
    assert run.train.batch_for(modality) >= 1 and run.train.lr_for(modality) > 0


def test_command_defaults_validate():
    from curi.export import check_export_options
    from curi.models.config import check_eval_options
    from curi.oracles.gap import check_gap_options

    with initialize_config_module("curi.conf", version_base="1.3"):
        eps = compose("episodes")
        gap = compose("gap")
        ev = compose("eval", overrides=["checkpoint=x"])
        show = compose("show")
    check_export_options(eps.n, eps.shard_size, eps.seed)
    check_gap_options(gap.episodes.test, gap.workers, gap.seed)
    check_eval_options(
        episodes=ev.episodes,
        seed=ev.seed,
        batch_size=ev.batch_size,
        num_workers=ev.num_workers,
        chunk=ev.chunk,
    )
    from curi.renderers.cli import _check_show

    _check_show(show)


# --- the command line: one line, exit code 2, nothing built --------------------------------
CLI_CASES = [
    (["episodes", "n=-1"], "curi episodes: error: n must be an integer in [1, "),
    (["episodes", "shard_size=0", "out=e.tar"], "curi episodes: error: shard_size must be"),
    (["gap", "episodes.test=0"], "curi gap: error: episodes.test must be an integer in [1, "),
    (["train", "train=tiny", "train.batch_size=0"], "curi train: error: train.batch_size must"),
    (["bank", "bank.max_depth=-1"], "curi bank: error: bank.max_depth must be an integer in"),
    (["show", "episode=0", "sheet_scale=0"], "curi show: error: sheet_scale must be a number"),
]


@pytest.mark.parametrize("args, message", CLI_CASES, ids=[c[0][0] for c in CLI_CASES])
def test_cli_bad_value_is_one_line(args, message, tmp_path):
    data = tmp_path / "data"
    r = run_curi(*args, "bank=tiny", f"data_dir={data}", "hydra.run.dir=run", cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), r.stderr[-2000:]
    assert not data.exists()  # refused before any bank was built
