"""The propose-and-verify learner (docs/learners.md): its grammar machine, proposals, exact
verification, posterior, honesty (what it reads and what its scores depend on) and training."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from reference import reference_eval

from curi import EpisodeSampler, EpisodeSpec, make_split, parse
from curi.bits import unpack_rows
from curi.errors import BankError, ConfigError
from curi.executor import execute
from curi.models.program_decoder import ProgramProposer
from curi.models.program_grammar import (
    TOKENS,
    allowed,
    concept_text,
    start,
    step,
    to_holes,
    to_sequence,
)
from curi.models.program_search import fill_holes, repairs, support_errors
from curi.models.propose_verify import ProposeVerify, Settings, load_universe
from curi.models.propose_verify_train import (
    fit_and_held,
    learner_from_checkpoint,
    load_checkpoint,
    save_checkpoint,
    target_texts,
    train_propose_verify,
)
from curi.splits import list_splits

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _walk(rnd: random.Random, holes: bool, max_steps: int = 40) -> list[str] | None:
    """A random token sequence the grammar machine completes (None: ran out of steps)."""
    st, seq = start(), []
    for _ in range(max_steps):
        tok = TOKENS[rnd.choice(allowed(st, holes))]
        seq.append(tok)
        st = step(st, tok)
        if st.done:
            return seq
    return None


def _episode(bank, i: int = 0, split: str = "concept_iid", subset: str = "test"):
    return EpisodeSampler(bank, split, subset, "hard", seed=0, size=max(i + 1, 8))[i]


def _learner(bank, proposer=None, **settings) -> ProposeVerify:
    torch.manual_seed(0)
    universe = load_universe(bank.path, "spec")
    return ProposeVerify(proposer or ProgramProposer(), universe, settings=Settings(**settings))


@pytest.fixture(scope="module")
def pv_ckpt(tiny_bank):
    """An untrained proposer with a fallback protonet of a few steps (one torch thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_propose_verify(
            tiny_bank, "concept_iid", steps=0, select=False, fallback_steps=4, select_episodes=4
        )
    finally:
        torch.set_num_threads(before)


def test_machine_accepts_every_bank_concept(tiny_bank):
    for text in tiny_bank.concepts:
        toks = parse(text).tokens()
        for seq in (to_sequence(toks), to_holes(toks)):
            st = start()
            for t in seq:
                st = step(st, t)
                assert st is not None, (text, t)
            assert st.done
        assert parse(concept_text(to_sequence(toks))).postfix() == text


def test_random_walks_parse_and_never_dead_end():
    rnd = random.Random(0)
    done = 0
    for _ in range(2000):
        seq = _walk(rnd, holes=False)
        if seq is not None:
            parse(concept_text(seq))
            done += 1
    assert done > 100


def test_every_proposal_parses(tiny_bank):
    e = _episode(tiny_bank)
    pv = _learner(tiny_bank, k=400, repair=True)
    sc = tiny_bank.scenes
    support = {"n_objects": sc.n_objects[e.support_ids], "props": sc.props[e.support_ids]}
    for holes in (True, False):
        torch.manual_seed(1)
        pv.proposer = ProgramProposer(holes=holes).eval()
        got = pv.proposer.sample(
            *_support_tensors(support, e.support_labels), n=64, temperature=1.0
        )
        assert got, "no sample completed"
        for toks, _ in got:
            assert any(t.startswith("<") for t in toks[:-1]) is False or holes
            for text in fill_holes(toks, {}, 20):
                parse(text)
    programs, errors = pv.search(
        support["n_objects"], support["props"], e.support_labels.astype(bool),
        _bits(support), seed=3,
    )  # fmt: skip
    assert len(programs) <= 400 and len({c.postfix() for c in programs}) == len(programs)
    for c in programs:
        assert parse(c.postfix()) == c


def _support_tensors(support, labels):
    from curi.models.program_decoder import scene_features

    feats, mask = scene_features(support["n_objects"], support["props"])
    return feats, mask, torch.as_tensor(np.asarray(labels, np.int64))


def _bits(support):
    from curi.executor import BitScenes

    return BitScenes.from_arrays(support["n_objects"], support["props"])


def test_verification_agrees_with_a_scalar_interpreter_outside_the_bank(tiny_bank):
    rnd = random.Random(5)
    known = set(tiny_bank.concepts)
    programs = []
    while len(programs) < 60:
        seq = _walk(rnd, holes=False)
        if seq is not None and (c := parse(concept_text(seq))).postfix() not in known:
            programs.append(c)
    e = _episode(tiny_bank, 2)
    records = tiny_bank.scene_records(e.support_ids)
    sc = tiny_bank.scenes
    support = {"n_objects": sc.n_objects[e.support_ids], "props": sc.props[e.support_ids]}
    errors = support_errors(programs, _bits(support), e.support_labels)
    for c, err in zip(programs, errors, strict=True):
        ref = np.array([reference_eval(c, r) for r in records])
        assert err == int((ref != e.support_labels.astype(bool)).sum()), c.postfix()


def test_repairs_are_one_token_away_and_parse():
    text = "x color? red = S-x shape? cube all and lambda S. exists="
    out = repairs(text)
    assert "x color? blue = S-x shape? cube all and lambda S. exists=" in out
    assert "x color? red = S-x shape? cube any and lambda S. exists=" in out
    assert text not in out
    for r in out:
        a, b = parse(r).tokens(), parse(text).tokens()
        assert len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) == 1


def test_posterior_weighs_as_the_strong_oracle(tiny_bank):
    """Given the bank's own consistent concepts as proposals, the learner's scores equal
    curi's strong oracle (whole bank, log-linear prior, size principle) on the same episode."""
    from curi.posterior import Posterior

    e = _episode(tiny_bank, 1)
    post = Posterior(tiny_bank, negatives="hard")
    idx = post.consistent(e.support_ids, e.support_labels)
    pv = _learner(tiny_bank)
    pv.search = lambda *a, **k: (  # noqa: E731 - the bank's consistent concepts, proposed
        [tiny_bank.concept(int(i)) for i in idx],
        np.zeros(len(idx), np.int64),
    )
    records = tiny_bank.scene_records(e.support_ids)
    ids = tiny_bank.eval_ids[:500]
    got = pv.predict(records, e.support_labels, tiny_bank.scene_records(ids))
    want = post.predict(e.support_ids, e.support_labels, ids)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_scores_do_not_depend_on_target_order(tiny_bank):
    e = _episode(tiny_bank, 3)
    pv = _learner(tiny_bank, k=64)
    support = tiny_bank.scene_records(e.support_ids)
    pv.search = lambda *a, **k: (  # one sure survivor, so scores are not all 0
        [parse(e.concept_text)],
        np.zeros(1, np.int64),
    )
    ids = tiny_bank.eval_ids[:300]
    perm = np.random.default_rng(0).permutation(len(ids))
    a = pv.predict(support, e.support_labels, tiny_bank.scene_records(ids))
    b = pv.predict(support, e.support_labels, tiny_bank.scene_records(ids[perm]))
    assert a.max() > 0
    np.testing.assert_array_equal(a[perm], b)


def test_bad_settings_are_refused():
    for k in (0, -1, 1.5, 65_537, "8", True):
        with pytest.raises(ConfigError, match="learner.k"):
            Settings(k=k)
    with pytest.raises(ConfigError, match="temperature"):
        Settings(temperature=-1)
    assert Settings(k=65_536).k == 65_536


@pytest.mark.parametrize("name", [s for s in list_splits() if s not in ("instance_iid", "mcd")])
def test_training_concepts_are_disjoint_from_test_concepts_by_synonym_group(tiny_bank, name):
    sp = make_split(tiny_bank, name)
    fit, hold = fit_and_held(tiny_bank, sp, seed=0)
    learned = np.r_[fit.train, hold.test]
    groups = np.asarray(tiny_bank.groups)
    assert np.isin(learned, sp.train).all()
    assert not np.isin(groups[learned], groups[np.r_[sp.test, sp.val]]).any()
    targets = target_texts(tiny_bank, learned)
    assert set(targets.values()) <= {tiny_bank.concepts[i] for i in learned}
    assert not set(np.unique(groups[hold.test])) & set(np.unique(groups[fit.train]))


def _guard_bank_files(monkeypatch, bank_dir: Path) -> None:
    """Make every read of a file of `bank_dir` outside ``scenes/`` raise."""
    import builtins

    root, scenes = Path(bank_dir).resolve(), (Path(bank_dir) / "scenes").resolve()

    def check(path):
        p = Path(path).resolve() if isinstance(path, (str, Path)) else None
        if p is not None and p.is_relative_to(root) and not p.is_relative_to(scenes):
            raise PermissionError(f"the learner opened {p}")

    def wrap(fn):
        def guarded(path, *a, **k):
            check(path)
            return fn(path, *a, **k)

        return guarded

    monkeypatch.setattr(np, "load", wrap(np.load))
    monkeypatch.setattr(builtins, "open", wrap(builtins.open))
    for name in ("open", "read_text", "read_bytes"):
        monkeypatch.setattr(Path, name, wrap(getattr(Path, name)))


def test_predicts_with_every_bank_file_but_scenes_refused(tiny_bank, pv_ckpt, monkeypatch):
    from curi import load_bank

    ckpt = pv_ckpt  # with its fallback protonet, which reads no bank file either
    e = _episode(tiny_bank, 4)
    support = tiny_bank.scene_records(e.support_ids)
    targets = tiny_bank.scene_records(tiny_bank.eval_ids[:200])
    _guard_bank_files(monkeypatch, tiny_bank.path)
    with pytest.raises((PermissionError, BankError), match="the learner opened"):  # it bites
        load_bank(tiny_bank.path)
    pv = learner_from_checkpoint(ckpt, tiny_bank.path, k=32)
    scores = pv.predict(support, e.support_labels, targets)
    assert scores.shape == (200,) and pv.stats.programs > 0
    assert pv.fallback(support, e.support_labels, targets).shape == (200,)


def test_checkpoint_round_trip_and_refusal(tiny_bank, pv_ckpt, tmp_path):
    ckpt = pv_ckpt
    path = save_checkpoint(ckpt, tmp_path / "pv.pt")
    back = load_checkpoint(path)
    assert back["settings"] == ckpt["settings"] and back["split"] == "concept_iid"
    assert back["bank"]["name"] == "tiny" and back["negatives"] == "hard"
    torch.save({"learner": "protonet"}, tmp_path / "other.pt")
    with pytest.raises(ConfigError, match="not a propose_verify checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def _planted(tiny_bank, holes: bool):
    """A proposer trained briefly on the episodes of one training concept, and an episode of
    that concept from another seed (a support set it never saw)."""
    from curi.models.propose_verify_train import train_proposer
    from curi.splits import Split

    sp = make_split(tiny_bank, "concept_iid")
    lengths = np.asarray(tiny_bank.lengths)[sp.train]
    h = int(sp.train[np.flatnonzero(lengths == 9)[0]])
    one, empty = np.array([h]), np.zeros(0, np.int64)
    planted = Split("planted", one, one, one, empty)
    torch.manual_seed(0)
    model = ProgramProposer(dim=32, layers=1, holes=holes)
    model, _ = train_proposer(
        tiny_bank, planted, planted, negatives="hard", steps=60, batch=8, lr=1e-2,
        model=model, seed=0, evals=1, held_episodes=8,
    )  # fmt: skip
    return h, model, EpisodeSampler(tiny_bank, planted, "train", seed=123, size=1)[0]


def test_greedy_proposal_of_a_planted_concept_has_its_extension(tiny_bank):
    h, model, e = _planted(tiny_bank, holes=False)
    pv = _learner(tiny_bank, model, k=1, temperature=0, repair=False)
    sc = tiny_bank.scenes
    n_obj, props = sc.n_objects[e.support_ids], sc.props[e.support_ids]
    bits = _bits({"n_objects": n_obj, "props": props})
    programs, _ = pv.search(n_obj, props, e.support_labels.astype(bool), bits, seed=0)
    assert len(programs) == 1
    ev = tiny_bank.eval_ids
    got = unpack_rows(execute(programs, tiny_bank.bit_scenes()), tiny_bank.num_scenes)[0][ev]
    np.testing.assert_array_equal(got, tiny_bank.truth(h)[ev])


def _map(tiny_bank, pv: ProposeVerify, episodes: int) -> float:
    from curi.oracles.model_score import model_predictions, score_arrays

    pred = model_predictions(pv.predict, tiny_bank, "concept_iid", episodes=episodes, seed=0)
    rows = score_arrays(
        tiny_bank, "concept_iid", query_scores=pred["query_scores"],
        eval_scores=pred["eval_scores"], oracles=False,
    )  # fmt: skip
    return rows["split"][0]["map"]


def test_a_trained_checkpoint_beats_an_untrained_one(tiny_bank):
    """On the same 200 seeded test episodes of concept_iid (test concepts never trained on)."""
    kw = {"select": False, "fallback_steps": 0}  # the proposer's own answers
    trained = train_propose_verify(tiny_bank, "concept_iid", steps=150, batch=16, **kw)
    untrained = train_propose_verify(tiny_bank, "concept_iid", steps=0, **kw)
    maps = [
        _map(tiny_bank, learner_from_checkpoint(c, tiny_bank.path, k=16, max_errors=25), 200)
        for c in (trained, untrained)
    ]
    assert maps[0] >= maps[1] + 0.05, maps


def test_learners_registry_checks_options():
    from curi.errors import OptionError
    from curi.models.learners import learner_options, list_learners

    assert list_learners() == ["propose_verify", "protonet"]
    assert learner_options("propose_verify", {"k": 8})["k"] == 8
    with pytest.raises(OptionError, match=r"unknown option\(s\) \['k'\]"):
        learner_options("protonet", {"k": 8})
    for k in (0, -3, 65_537):
        with pytest.raises(ConfigError, match="learner.k"):
            learner_options("propose_verify", {"k": k})
    with pytest.raises(OptionError, match="k=1.5 is not int"):
        learner_options("propose_verify", {"k": 1.5})


def test_learner_presets_match_the_registry():
    import yaml

    from curi.models.learners import learner_options
    from curi.presets import conf_dir

    for path in sorted((conf_dir() / "learner").glob("*.yaml")):
        opts = yaml.safe_load(path.read_text())
        name = opts.pop("name")
        assert name == path.stem and learner_options(name, opts)["name"] == name


def test_evaluate_run_reports_fallbacks_and_refuses_other_negatives(tiny_bank, pv_ckpt, tmp_path):
    from curi.models.propose_verify_train import evaluate_run

    ckpt = {**pv_ckpt, "settings": {**pv_ckpt["settings"], "k": 8}}
    path = save_checkpoint(ckpt, tmp_path / "pv.pt")
    spec = EpisodeSpec("concept_iid", "test", "hard", size=4)
    m = evaluate_run(path, tiny_bank, spec, oracles=False)
    assert m["learner"] == "propose_verify" and m["episodes"] == 4 and m["settings"]["k"] == 8
    assert 0.0 <= m["fallback_model_rate"] <= m["fallback_rate"] <= 1.0
    assert (m["map_answered"] is None) == (m["fallback_rate"] == 1.0)
    assert m["fallback"]["pooling"] == "avg" and m["fallback"]["steps"] == 4
    # one program, no near-miss allowed: the fallback protonet answers, and scores rank scenes
    ckpt["settings"].update(k=1, max_errors=0, temperature=0.0, repair=False)
    path = save_checkpoint(ckpt, tmp_path / "pv1.pt")
    m = evaluate_run(path, tiny_bank, spec, oracles=False)
    assert m["fallback_model_rate"] > 0 and m["map"] > 0
    with pytest.raises(ConfigError, match="negatives=hard, not easy"):
        evaluate_run(path, tiny_bank, spec.replace(negatives="easy"), oracles=False)
    with pytest.raises(ConfigError, match="trained on split concept_iid, not boolean"):
        evaluate_run(path, tiny_bank, spec.replace(split="boolean"), oracles=False)


class _Payload:
    """Stands for code a crafted checkpoint would run while unpickling."""

    def __reduce__(self):
        return (Path.touch, (Path("/tmp/curi-propose-verify-payload-ran"),))


def test_a_checkpoint_needing_other_objects_is_refused_never_unpickled(tmp_path):
    from curi.models.propose_verify_train import is_checkpoint, load_checkpoint

    ran = Path("/tmp/curi-propose-verify-payload-ran")
    ran.unlink(missing_ok=True)
    path = tmp_path / "best.pt"
    torch.save({"learner": "propose_verify", "x": _Payload()}, path)
    with pytest.raises(ConfigError, match="could run code"):
        load_checkpoint(path)
    assert not is_checkpoint(path) and not ran.exists()


def test_the_fallback_protonet_trains_on_the_fitting_concepts_only(tiny_bank, pv_ckpt, monkeypatch):
    """Trained by the protonet's own training on the learner's fitting concepts, its checkpoint
    chosen on the held-out tenth: never on a val or test concept. Stored in the checkpoint."""
    import curi.models.train as train_mod
    from curi.splits.saved import load_split

    seen = []
    real = train_mod.train

    def spy(run, **kw):
        seen.append(load_split(tiny_bank, run.split))
        return real(run, **kw)

    monkeypatch.setattr(train_mod, "train", spy)
    ckpt = train_propose_verify(
        tiny_bank, "concept_iid", steps=0, select=False, fallback_steps=2, select_episodes=2
    )
    (split,) = seen
    sp = make_split(tiny_bank, "concept_iid")
    fit, hold = fit_and_held(tiny_bank, sp, seed=0)
    np.testing.assert_array_equal(split.train, fit.train)
    np.testing.assert_array_equal(split.val, hold.val)
    groups = np.asarray(tiny_bank.groups)
    held_out = groups[np.r_[sp.val, sp.test]]
    assert not np.isin(groups[np.r_[split.train, split.val]], held_out).any()
    fb = ckpt["fallback"]
    assert fb["config"]["pooling"]["name"] == "avg" and fb["config"]["modality"]["name"] == "schema"
    assert fb["steps"] == 2 and fb["best_step"] in (1, 2) and fb["state_dict"]
    assert pv_ckpt["fallback"]["steps"] == 4
    none = train_propose_verify(tiny_bank, "concept_iid", steps=0, select=False, fallback_steps=0)
    assert none["fallback"] is None and len(seen) == 1
    assert learner_from_checkpoint(none, tiny_bank.path).fallback is None


def test_an_episode_without_survivor_is_answered_by_the_fallback(tiny_bank, pv_ckpt, tmp_path):
    """With one program and no near-miss allowed, an episode with no survivor gets the
    fallback's scores (after a round trip through the safely loaded checkpoint), not 0s."""
    from curi.models.protonet_fallback import ProtonetPredict

    back = load_checkpoint(save_checkpoint(pv_ckpt, tmp_path / "pv.pt"))
    pv = learner_from_checkpoint(back, tiny_bank.path, k=1, max_errors=0, temperature=0.0)
    assert isinstance(pv.fallback, ProtonetPredict)
    bare = learner_from_checkpoint(back, tiny_bank.path, fallback=None, k=1, max_errors=0)
    targets = tiny_bank.scene_records(tiny_bank.eval_ids[:300])
    for i in range(8):
        e = _episode(tiny_bank, i)
        support = tiny_bank.scene_records(e.support_ids)
        scores = pv.predict(support, e.support_labels, targets)
        if pv.stats.fallback == "model":
            break
    else:
        pytest.fail("every episode had a survivor with k=1")
    want = pv.fallback(support, e.support_labels, targets)
    np.testing.assert_array_equal(scores, want)
    assert scores.std() > 0 and ((scores > 0) & (scores < 1)).any()
    assert not bare.predict(support, e.support_labels, targets).any()  # no fallback: 0s
    pos = np.flatnonzero(e.support_labels)  # the support's positives rank above its negatives
    on_support = pv.fallback(support, e.support_labels, support)
    assert on_support[pos].mean() > np.delete(on_support, pos).mean()


def test_a_damaged_fallback_is_refused(tiny_bank, pv_ckpt):
    bad = {**pv_ckpt["fallback"], "state_dict": dict(pv_ckpt["fallback"]["state_dict"])}
    key = next(iter(bad["state_dict"]))
    bad["state_dict"][key] = bad["state_dict"][key] + 1
    with pytest.raises(ConfigError, match="fallback model .* is damaged"):
        learner_from_checkpoint({**pv_ckpt, "fallback": bad}, tiny_bank.path)
