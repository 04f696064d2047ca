"""The order in which the propose-and-verify learner (docs/learners.md) spends its K programs:
the grammar's most probable sketches, the decoder's beam, the best-first search over
(sketch, filling) pairs, the choice of search settings on held-out training concepts, and the
records of `benchmarks/propose_verify_records.py`."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import curi.models.propose_verify as pv_mod
from curi import EpisodeSampler, EpisodeSpec, make_split, parse
from curi.concepts import CONSTANT_TYPES, QUANTIFIERS
from curi.errors import ConfigError
from curi.executor import BitScenes
from curi.grammar import RULES, sample_concepts
from curi.models.program_decoder import ProgramProposer, scene_features
from curi.models.program_enumerate import GrammarProposer, grammar_sketches
from curi.models.program_grammar import (
    END,
    HOLE_VALUES,
    TOKENS,
    completes,
    concept_text,
    start,
    step,
)
from curi.models.program_search import fill_holes
from curi.models.propose_verify import ProposeVerify, Settings, load_universe
from curi.models.propose_verify_train import fit_and_held, select_settings
from curi.rejection import static_rejection
from curi.scenes import COLORS, MATERIALS, SHAPES, SIZES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[1]


def _every_filling(tokens) -> list[str]:
    """The concept strings of `tokens` with each hole taking every value of its type."""
    slots = [i for i, t in enumerate(tokens) if t in HOLE_VALUES]
    out = []
    for combo in itertools.product(*(HOLE_VALUES[tokens[i]] for i in slots)):
        filled = list(tokens)
        for i, v in zip(slots, combo, strict=True):
            filled[i] = v
        out.append(concept_text(filled))
    return out


def _support(bank, i: int = 0):
    """(n_objects, props, labels, bits) of the support set of test episode `i` of concept_iid."""
    e = EpisodeSampler(bank, "concept_iid", "test", "hard", seed=0, size=8)[i]
    sc = bank.scenes
    n_obj, props = sc.n_objects[e.support_ids], sc.props[e.support_ids]
    return n_obj, props, e.support_labels.astype(bool), BitScenes.from_arrays(n_obj, props)


def _tensors(n_obj, props, labels):
    feats, mask = scene_features(n_obj, props)
    return feats, mask, torch.as_tensor(labels.astype(np.int64))


# --- the grammar's most probable sketches ------------------------------------------------------
def test_grammar_sketches_are_distinct_ordered_and_complete():
    got = grammar_sketches(2000)
    assert len(got) == 2000
    seqs = [s for s, _ in got]
    lps = [lp for _, lp in got]
    assert len(set(seqs)) == 2000
    assert all(a >= b for a, b in itertools.pairwise(lps)), "log-probabilities rise somewhere"
    assert all(lp < 0 for lp in lps)
    for seq in seqs:
        assert completes(seq), seq
        body, end = seq[:-1], seq[-1]
        assert end in QUANTIFIERS or end == END
        assert (end == END) == (not any(t in ("x", "S-x") for t in body)), seq
        assert not any(t in CONSTANT_TYPES for t in body), seq  # constants only as holes
        for text in _every_filling(seq):
            parse(text)
    # the search is deterministic and best first: a shorter list is a prefix of a longer one
    assert grammar_sketches(300) == got[:300]


def test_the_first_sketches_are_the_grammars_most_probable():
    """By hand from `curi.grammar.RULES`: START -> BOOL lambda S. quantifier (0.5), BOOL -> C C =
    (3/28), one C -> OBJECT FC (0.5, then x and color? with probability 1) and the other C a
    colour, whose eight productions fold into one hole (8 x 0.5/8). Shapes and materials tie
    with colours, as do the operand orders (x first, hole first), for both quantifiers: 12
    sketches (x against x, as ``x color? x color? =``, ties too but is a self-comparison the
    bank's static rules reject: left out). Then BOOL -> SET_C C all with SET -> S and a colour
    hole."""

    def prob(nt, rhs):
        return sum(p for p, r in RULES[nt] if r == rhs)

    hole_c = sum(p for p, r in RULES["C"] if len(r) == 1 and r[0] in COLORS)
    assert hole_c == pytest.approx(0.5)
    top = (
        prob("START", ("BOOL", "lambda", "S.", "exists="))
        * prob("BOOL", ("C", "C", "="))
        * prob("C", ("OBJECT", "FC"))
        * prob("OBJECT", ("x",))
        * prob("FC", ("color?",))
        * hole_c
    )
    got = grammar_sketches(40)
    assert got[0][1] == pytest.approx(math.log(top), abs=1e-12)
    tied = [s for s, lp in got if lp == pytest.approx(math.log(top), abs=1e-12)]
    assert len(tied) == 12
    assert ("x", "color?", "<color>", "=", "exists=") in tied
    assert ("<shape>", "x", "shape?", "=", "for-all=") in tied
    assert ("x", "material?", "x", "material?", "=", "exists=") not in dict(got)
    assert [s for s, _ in got[:12]] == tied  # the ties come first
    nxt = (
        prob("START", ("BOOL", "lambda", "S.", "exists="))
        * prob("BOOL", ("SETC", "C", "all"))
        * prob("SETC", ("SET", "FC"))
        * prob("SET", ("S",))
        * hole_c
    )
    assert got[12][1] == pytest.approx(math.log(nxt), abs=1e-12)
    assert dict(got)[("S", "color?", "<color>", "all", END)] == pytest.approx(math.log(nxt))


def test_every_likely_grammar_draw_is_among_the_sketches():
    """Draws of the grammar's own sampler, their constants turned into holes: each one the
    machine accepts and more probable than the 2,000th sketch is listed, with its draw's
    log-probability plus log(number of values) per folded constant. Draws holding a digit are
    left out: ``<int>`` folds both the location bins (8) and the counts (3)."""
    sizes = {"color": len(COLORS), "shape": len(SHAPES), "material": len(MATERIALS)}
    sizes["size"] = len(SIZES)
    hole = {t: f"<{t}>" for t in sizes}
    sketches = dict(grammar_sketches(2000))
    floor = min(sketches.values())
    checked = 0
    for text, lp in sample_concepts(20_000, seed=0):
        toks = text.split()
        body = toks[: toks.index("lambda")]
        if any(CONSTANT_TYPES.get(t) not in (None, *sizes) for t in body):
            continue
        seq = tuple(hole[CONSTANT_TYPES[t]] if t in CONSTANT_TYPES else t for t in body)
        seq += (toks[-1],) if any(t in ("x", "S-x") for t in body) else (END,)
        if not completes(seq):
            assert toks[-1] == "for-all=" and "S-x" in body, seq  # the bank's static rule
            continue
        if static_rejection(parse(text)) is not None:
            assert seq not in sketches, text  # no K spent on what the bank's rules reject
            continue
        lp += sum(math.log(sizes[CONSTANT_TYPES[t]]) for t in body if t in CONSTANT_TYPES)
        if lp > floor + 1e-9:
            assert seq in sketches, (text, lp)
            checked += 1
        if seq in sketches:
            assert sketches[seq] == pytest.approx(lp, abs=1e-9), text
    assert checked > 8_000  # of 20,000 draws, those the static rules keep


def test_the_grammar_proposer_gives_the_same_sketches_every_call():
    gp = GrammarProposer()
    first = gp.sketches(50)
    want = [(list(s), lp) for s, lp in grammar_sketches(50)]
    assert first == want and len(first) == 50
    first[0][0].append("junk")  # a caller's change to its list is its own
    assert gp.sketches(50) == want
    assert GrammarProposer().sketches(20) == want[:20]


def test_every_prefix_the_machine_accepts_can_complete():
    """Four comparisons in a row (each a bool of level 3) could only be joined at level 6,
    above the 5 levels: the machine refuses the fourth's first token (before, it let a
    decoder go on there for ever, and a beam could end with no complete sequence)."""
    st = start()
    for t in "<color> x color? =".split() * 4:
        st = step(st, t)
        if st is None:
            return  # refused: what should happen
    pytest.fail("the machine accepted four comparisons in a row, which no token can complete")


# --- beam search of the decoder -----------------------------------------------------------------
def _seq_logp(model, feats, mask, labels, tokens) -> float:
    """A sequence's log-probability under `model`, by teacher forcing (its mean loss)."""
    ids = torch.tensor([[TOKENS.index(t) for t in tokens]])
    with torch.no_grad():
        loss = model.loss(feats[None], mask[None], labels[None], ids)
    return -float(loss) * len(tokens)


def test_beam_is_distinct_sorted_complete_and_scored_right(tiny_bank):
    n_obj, props, labels, _ = _support(tiny_bank, 0)
    feats, mask, lab = _tensors(n_obj, props, labels)
    torch.manual_seed(0)
    model = ProgramProposer().eval()
    got = model.beam(feats, mask, lab, width=16)
    assert 0 < len(got) <= 16
    seqs = [tuple(s) for s, _ in got]
    lps = [lp for _, lp in got]
    assert len(set(seqs)) == len(seqs)
    assert all(a >= b for a, b in itertools.pairwise(lps))
    for seq, lp in got:
        assert completes(seq), seq
        for text in fill_holes(seq, {}, 2000):
            parse(text)
        assert lp == pytest.approx(_seq_logp(model, feats, mask, lab, seq), abs=1e-3)


def test_beams_best_is_at_least_as_probable_as_the_greedy_sequence(tiny_bank):
    """Beam search is not greedy decoding: its best sequence is often a more probable one than
    the greedy sequence, never a less probable one (when the greedy sequence completes)."""
    compared = 0
    for i, seed in itertools.product((0, 1), (0, 1, 3)):
        n_obj, props, labels, _ = _support(tiny_bank, i)
        feats, mask, lab = _tensors(n_obj, props, labels)
        torch.manual_seed(seed)
        model = ProgramProposer().eval()
        greedy = model.sample(feats, mask, lab, n=1, temperature=0)
        if not greedy:
            continue  # ran out of steps
        (g_seq, g_lp), beam = greedy[0], model.beam(feats, mask, lab, width=16)
        assert g_lp == pytest.approx(_seq_logp(model, feats, mask, lab, g_seq), abs=1e-3)
        assert beam and beam[0][1] >= g_lp - 1e-4, (beam[:1], greedy)
        compared += 1
    assert compared >= 2


# --- how search spends K -----------------------------------------------------------------------
class _Fixed:
    """A support-free proposer of fixed sketches, as `GrammarProposer` is."""

    holes = True

    def __init__(self, sketches: list[tuple[str, float]]) -> None:
        self._sketches = [(s.split(), lp) for s, lp in sketches]

    def sketches(self, budget: int):
        return [(list(s), lp) for s, lp in self._sketches[:budget]]


def _executed(monkeypatch) -> list[str]:
    """The programs the search executes on the support set, in order (a spy)."""
    seen: list[str] = []
    real = pv_mod.support_errors

    def spy(concepts, support, labels):
        seen.extend(c.postfix() for c in concepts)
        return real(concepts, support, labels)

    monkeypatch.setattr(pv_mod, "support_errors", spy)
    return seen


@pytest.mark.parametrize("fill_decay", [1.0, 1e6])
@pytest.mark.parametrize("decode", ["sample", "beam", "grammar"])
def test_search_executes_at_most_k_distinct_programs(tiny_bank, monkeypatch, decode, fill_decay):
    n_obj, props, labels, bits = _support(tiny_bank, 0)
    universe = load_universe(tiny_bank.path, "spec")
    ran = _executed(monkeypatch)
    for k, repair in ((16, True), (16, False), (5, True)):
        ran.clear()
        torch.manual_seed(0)
        proposer = GrammarProposer() if decode == "grammar" else ProgramProposer()
        how = "beam" if decode == "beam" else "sample"
        settings = Settings(k=k, repair=repair, fill_decay=fill_decay, decode=how)
        learner = ProposeVerify(proposer, universe, settings=settings)
        programs, errors = learner.search(n_obj, props, labels, bits, seed=3)
        assert len(ran) <= k, (k, repair, ran)
        assert ran, (k, repair)  # no dead ends: even a beam of 4 completes
        assert len(set(ran)) == len(ran)
        assert ran == [c.postfix() for c in programs] and len(errors) == len(programs)


def _order(monkeypatch, tiny_bank, sketches, **settings) -> list[str]:
    n_obj, props, labels, bits = _support(tiny_bank, 1)
    ran = _executed(monkeypatch)
    universe = load_universe(tiny_bank.path, "spec")
    learner = ProposeVerify(_Fixed(sketches), universe, settings=Settings(**settings))
    learner.search(n_obj, props, labels, bits, seed=0)
    return ran


_EQUAL = [
    ("x color? <color> = exists=", -2.0),
    ("x shape? <shape> = exists=", -2.0),
    ("x material? <material> = exists=", -2.0),
]


def _prop(text: str) -> str:
    return next(t for t in text.split() if t.endswith("?"))


def test_a_huge_fill_decay_is_round_robin_over_equal_sketches(tiny_bank, monkeypatch):
    ran = _order(monkeypatch, tiny_bank, _EQUAL, k=6, repair=False, fill_decay=1e6)
    assert [_prop(t) for t in ran] == ["color?", "shape?", "material?"] * 2
    assert len(set(ran)) == 6


def test_no_fill_decay_exhausts_the_first_sketch_first(tiny_bank, monkeypatch):
    ran = _order(monkeypatch, tiny_bank, _EQUAL, k=10, repair=False, fill_decay=0.0)
    assert [_prop(t) for t in ran] == ["color?"] * len(COLORS) + ["shape?"] * 2
    assert {t.split()[2] for t in ran[: len(COLORS)]} == set(COLORS)  # every colour once


def test_fill_decay_one_prices_the_rth_filling_at_log_1_plus_r(tiny_bank, monkeypatch):
    """Sketch A at -1, B at -3: A's r-th filling (from 0) comes at -1 - log(1 + r), so its
    first seven come before B's first (-1 - log 7 > -3 > -1 - log 8), then B, A's eighth and
    B's next ones."""
    sketches = [("x color? <color> = exists=", -1.0), ("<color> x color? = exists=", -3.0)]
    ran = _order(monkeypatch, tiny_bank, sketches, k=12, repair=False, fill_decay=1.0)
    which = ["A" if t.startswith("x") else "B" for t in ran]
    assert which == ["A"] * 7 + ["B", "A"] + ["B"] * 3


def test_bad_search_settings_are_refused():
    with pytest.raises(ConfigError, match="learner.decode"):
        Settings(decode="x")
    with pytest.raises(ConfigError, match="learner.fill_decay"):
        Settings(fill_decay=-1)
    assert Settings(fill_decay=0).fill_decay == 0 and Settings(decode="beam").decode == "beam"


# --- the choice of search settings ---------------------------------------------------------------
@pytest.mark.parametrize("reverse", [False, True])
def test_select_settings_takes_the_grid_point_of_highest_hit_mass(tiny_bank, reverse):
    _, hold = fit_and_held(tiny_bank, make_split(tiny_bank, "concept_iid"), seed=0)
    grid = ({"fill_decay": 0.0, "repair": False}, {"fill_decay": 1e6, "repair": True})
    grid = grid[::-1] if reverse else grid
    universe = load_universe(tiny_bank.path, "spec")
    base = Settings(k=128, max_errors=1, seed=7)
    learner = ProposeVerify(GrammarProposer(), universe, settings=base)
    spec = EpisodeSpec(hold, "test", "hard", seed=1, size=8)
    chosen, table = select_settings(learner, tiny_bank, spec, grid)
    assert [{k: r[k] for k in grid[0]} for r in table] == list(grid)
    masses = [r["hit_mass"] for r in table]
    assert masses[0] != masses[1], table  # else the test would not tell the points apart
    best = table[int(np.argmax(masses))]
    assert (chosen.fill_decay, chosen.repair) == (best["fill_decay"], best["repair"])
    assert (chosen.k, chosen.max_errors, chosen.seed) == (128, 1, 7)
    assert learner.settings == chosen


# --- the records of the measurement script -------------------------------------------------------
def _records_script():
    if str(ROOT / "benchmarks") not in sys.path:  # the script imports its helpers (_report)
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "propose_verify_records", ROOT / "benchmarks" / "propose_verify_records.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_records_script_writes_one_record_per_key(tiny_bank_dir, tmp_path, capsys):
    script = _records_script()
    out = tmp_path / "r.json"
    other = {"learner": "propose_verify", "bank": "tiny", "split": "concept_iid", "k": 8}
    out.write_text(json.dumps([other]))  # another key: kept
    args = ["--learner", "grammar_only", "--bank", str(tiny_bank_dir), "--k", "8"]
    args += ["--episodes", "3", "--results", str(out)]
    assert script.main(args) == 0
    rows = json.loads(out.read_text())
    assert rows[0] == other and len(rows) == 2
    rec = rows[1]
    keys = "learner bank split negatives k episodes map cba map_strong map_weak share_of_strong"
    keys += " recall_at_k fallback_rate ms_per_episode"
    assert set(keys.split()) <= set(rec)
    assert (rec["learner"], rec["bank"], rec["split"]) == ("grammar_only", "tiny", "concept_iid")
    assert (rec["negatives"], rec["k"], rec["episodes"]) == ("hard", 8, 3)
    for key in ("map", "cba", "map_strong", "map_weak", "recall_at_k", "fallback_rate"):
        assert 0.0 <= rec[key] <= 1.0, (key, rec[key])
    assert rec["map_strong"] > 0
    assert rec["share_of_strong"] == pytest.approx(rec["map"] / rec["map_strong"])
    assert rec["ms_per_episode"] > 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == rec
    assert script.main(args) == 0  # the same key again: replaced, not appended
    again = json.loads(out.read_text())
    assert len(again) == 2 and again[0] == other
    assert {k: again[1][k] for k in keys.split()[:6]} == {k: rec[k] for k in keys.split()[:6]}


def test_a_target_cache_computes_the_evaluation_set_once_between_query_sets():
    """`model_predictions` alternates each episode's query set with the one evaluation set: a
    predict keeping the last two target sets computes the evaluation set's once."""
    from curi.oracles.model_score import TargetCache

    made = []
    cache = TargetCache(lambda t: made.append(t) or len(made))
    ev = ["eval"]
    for i in range(5):
        query = [f"query {i}"]
        cache(query)
        assert cache(ev) == 2  # made once, after the first query set
    assert made.count(ev) == 1 and len(made) == 6


def test_random_walks_under_the_mask_always_complete():
    """Every prefix the machine accepts can be completed: 2,000 walks choosing uniformly among
    the allowed tokens (with and without holes) all end within 60 tokens, none at a state
    with no allowed token."""
    from curi.models.program_grammar import allowed

    rnd = random.Random(0)
    for walk in range(2000):
        state = start()
        for _ in range(60):
            options = allowed(state, walk % 2 == 0)
            assert options, f"walk {walk} reached a state with no allowed token"
            state = step(state, TOKENS[rnd.choice(options)])
            if state.done:
                break
        assert state.done, f"walk {walk} did not end within 60 tokens"


def test_the_targets_table_takes_the_most_episodes_both_learners_have():
    """One row a split: the largest episode count measured for both the learner and the
    grammar-only reference; shares compared with the target, mAP with the weak oracle's."""
    script = _records_script()

    def rec(learner, split, n, m, weak=0.5):
        return {
            "learner": learner,
            "bank": "default",
            "split": split,
            "negatives": "hard",
            "k": 1024,
            "episodes": n,
            "map": m,
            "map_weak": weak,
            "share_of_strong": m,
        }

    rows = [
        rec("propose_verify", "concept_iid", 500, 0.9),
        rec("propose_verify", "concept_iid", 2000, 0.86),
        rec("grammar_only", "concept_iid", 500, 0.6),
        rec("grammar_only", "concept_iid", 2000, 0.5),
        rec("propose_verify", "counting", 2000, 0.4),  # no reference at 2,000: 500 is shown
        rec("propose_verify", "counting", 500, 0.45),
        rec("grammar_only", "counting", 500, 0.3),
        rec("propose_verify", "boolean", 500, 0.7),  # no reference at all
    ]
    lines = {r.split(" | ")[0].strip("| "): r for r in script.targets_table(rows).splitlines()}
    assert lines["concept_iid"] == (
        "| concept_iid | 2,000 | 0.860 (0.860) | 0.500 (0.500) | 0.500 | 0.85 | yes | yes "
        "| +0.360 |"
    )
    assert lines["counting"] == (
        "| counting | 500 | 0.450 (0.450) | 0.300 (0.300) | 0.500 | 0.80 | no | no | +0.150 |"
    )
    assert "not measured" in lines["boolean"] and "not measured" in lines["complexity"]
