"""The AP on the evaluation set of many posteriors at once equals, to the bits, the AP of each
posterior scored alone (`curi.oracles.metrics.oracle_average_precision`), on every path: no
consistent hypothesis, few groups (cells), too many cells, many groups (scene scores)."""

import warnings

import numpy as np
import pytest

from curi.bits import unpack_rows
from curi.episodes import EpisodeSampler
from curi.oracles import eval_ap, metrics
from curi.oracles.eval_ap import oracle_aps
from curi.oracles.eval_set import EvalSet
from curi.oracles.oracle import Oracle
from curi.posterior import Posteriors
from curi.splits import make_split


@pytest.fixture(scope="module")
def episodes(tiny_bank):
    """(concepts, posteriors) of the strong and weak oracles, hard and easy negatives."""
    concepts, posts = [], []
    split = make_split(tiny_bank, "binding_color")
    for negatives in ("hard", "easy"):
        sampler = EpisodeSampler(tiny_bank, split, "test", negatives, seed=3, size=150)
        eps = [sampler[i] for i in range(len(sampler))]
        ids = np.stack([e.support_ids for e in eps])
        labels = np.stack([e.support_labels for e in eps])
        for hyps in (None, split.train):
            posts.append(Oracle(tiny_bank, hyps, negatives=negatives).posteriors(ids, labels))
            concepts.append([e.concept for e in eps])
    return np.concatenate(concepts), Posteriors.concat(posts)


@pytest.mark.parametrize("max_cells", [16, 4, 0])  # 0: every posterior by scene scores
def test_batched_aps_equal_one_by_one(tiny_bank, episodes, monkeypatch, max_cells):
    monkeypatch.setattr(metrics, "_MAX_CELLS", max_cells)
    monkeypatch.setattr(eval_ap, "_MAX_CELLS", max_cells)
    ev, groups = EvalSet.from_bank(tiny_bank), np.asarray(tiny_bank.groups)
    concepts, post = episodes
    got = oracle_aps(ev, concepts, post, groups)
    sizes = set()
    for j, h in enumerate(concepts):
        idx, w = post[j]
        label = unpack_rows(ev.rows[h], len(ev))
        want = metrics.oracle_average_precision(ev, label, idx, w, groups)
        assert got[j].tobytes() == np.float64(want).tobytes(), j
        n_groups = len(np.unique(groups[idx]))
        sizes.add(0 if n_groups == 0 else 1 if n_groups <= 8 else 2)
    assert sizes == {0, 1, 2}


def test_bit_scores_equal_scene_scores():
    """`loops.bit_scores` lists the set bits of packed rows as `set_bits_rows` does and
    scores each under its row's episode as `metrics._scene_scores` does, to the bits: 1 to
    20 groups (blocks of 8 full and partial), an episode's rows apart and repeated, empty
    rows, bits in the last word."""
    from curi.bits import pack_rows, set_bits_rows
    from curi.oracles.loops import bit_scores

    rng = np.random.default_rng(0)
    m, counts = 300, np.array([1, 7, 8, 9, 16, 20])
    rows = pack_rows(rng.random((40, m)) < 0.3)
    groups = [rng.choice(len(rows), c, replace=False) for c in counts]
    weights = [rng.dirichlet(np.ones(c)) for c in counts]
    blocks = -(-counts // 8)
    first = np.cumsum(blocks) - blocks
    w = np.zeros((blocks.sum(), 8))
    block_rows = np.zeros(8 * blocks.sum(), np.int64)
    for e, (g, wg) in enumerate(zip(groups, weights, strict=True)):
        w.reshape(-1)[8 * first[e] : 8 * first[e] + len(g)] = wg
        block_rows[8 * first[e] : 8 * first[e] + len(g)] = g
    nibbles = (w.reshape(-1, 2, 1, 4) * metrics._NIBBLE_BITS).sum(-1)
    tables = (nibbles[:, 1, :, None] + nibbles[:, 0, None, :]).reshape(-1, 256)
    owner = np.array([0, 3, 5, 1, 3, 2, 4, 0, 5])
    sets = pack_rows(rng.random((len(owner), m)) < rng.random((len(owner), 1)))
    sets[2] = 0
    args = (rows, block_rows, tables, first, counts, sets, owner)
    listed, scenes, got = bit_scores(*args)
    r, at = set_bits_rows(sets)
    np.testing.assert_array_equal(listed, r)
    np.testing.assert_array_equal(scenes, at)
    want = [metrics._scene_scores(rows[g], wg, m) for g, wg in zip(groups, weights, strict=True)]
    expected = np.array([want[owner[k]][u] for k, u in zip(r, at, strict=True)])
    assert got.tobytes() == expected.tobytes()


def test_random_aps_equal_one_by_one():
    """`random_aps` from each episode's draws equals `metrics.random_average_precision`
    episode by episode, to the bits: lengths about the pairwise sum's blocks (8, 128), every
    scene positive, and none (NaN)."""
    from curi.oracles.eval_ap import random_aps

    m, sizes = 3000, [1, 2, 7, 8, 9, 127, 128, 129, 257, 1000, 3000, 0, 5]
    sizes += np.random.default_rng(0).integers(1, m, 40).tolist()
    ref, picks = [], []
    for k, n in enumerate(sizes):
        with warnings.catch_warnings():  # the mean of no positives: NaN, with a warning
            warnings.simplefilter("ignore", RuntimeWarning)
            ref.append(metrics.random_average_precision(np.random.default_rng(k), n, m))
        picks.append(np.random.default_rng(k).choice(m, size=n, replace=False))
    lengths = [len(p) for p in picks]
    np.testing.assert_array_equal(random_aps(np.concatenate(picks), lengths, m), ref)
