"""Episode invariants, hard-negative pools checked by brute force, and determinism."""

import numpy as np
import pytest
import torch

from curi import ConfigError
from curi.bits import unpack_rows
from curi.episodes import EpisodeSampler
from curi.episodes import sampler as episodes


@pytest.fixture(scope="module")
def dense(tiny_bank):
    """The truth matrix as booleans (H, N) for brute-force checks."""
    return unpack_rows(np.asarray(tiny_bank.truth_words), tiny_bank.num_scenes)


@pytest.fixture(scope="module")
def hard(tiny_bank):
    return EpisodeSampler(tiny_bank, "concept_iid", "train", "hard", seed=3)


def _check_set(ep_ids, labels, truth_h):
    assert len(ep_ids) == 25 and sorted(labels.tolist()) == [0] * 20 + [1] * 5
    assert len(set(ep_ids.tolist())) == 25
    np.testing.assert_array_equal(truth_h[ep_ids], labels.astype(bool))


def test_invariants_and_hard_negative_pools(tiny_bank, dense, hard):
    in_pool = full = 0
    for i in range(150):
        e = hard[i]
        h = e.concept
        assert e.concept in hard.concepts and e.concept_text == tiny_bank.concepts[h]
        _check_set(e.support_ids, e.support_labels, dense[h])
        _check_set(e.query_ids, e.query_labels, dense[h])
        assert not set(e.support_ids) & set(e.query_ids)
        sets = (
            (e.support_ids, e.support_labels, e.support_alternates),
            (e.query_ids, e.query_labels, e.query_alternates),
        )
        for ids, labels, alts in sets:
            # alternates: every concept but h true on all five positives
            brute = np.flatnonzero(dense[:, ids[labels == 1]].all(1))
            assert sorted(alts.tolist()) == sorted(set(brute.tolist()) - {h})
            pool = dense[alts].any(0) & ~dense[h] if len(alts) else np.zeros(dense.shape[1], bool)
            negs = ids[labels == 0]
            if pool.sum() >= 40:  # room for both sets: every negative comes from the pool
                full += 1
                assert pool[negs].all()
            in_pool += pool[negs].sum()
    assert full > 50 and in_pool > 0


def test_easy_negatives_never_satisfy_h_and_share_positives(tiny_bank, dense, hard):
    easy = EpisodeSampler(tiny_bank, "concept_iid", "train", "easy", seed=3)
    for i in range(50):
        e, eh = easy[i], hard[i]
        assert not dense[e.concept][e.support_ids[e.support_labels == 0]].any()
        assert not dense[e.concept][e.query_ids[e.query_labels == 0]].any()
        assert e.concept == eh.concept
        np.testing.assert_array_equal(
            np.sort(e.support_ids[e.support_labels == 1]),
            np.sort(eh.support_ids[eh.support_labels == 1]),
        )
        assert len(e.support_alternates) == 0


def test_random_query_negatives(tiny_bank, dense):
    s = EpisodeSampler(tiny_bank, "concept_iid", "train", "hard", seed=3, query_negatives="random")
    with_alternates = 0
    for i in range(20):
        e = s[i]
        assert len(e.query_alternates) == 0
        assert not dense[e.concept][e.query_ids[e.query_labels == 0]].any()
        with_alternates += len(e.support_alternates) > 0
    assert with_alternates > 5


def test_same_index_same_episode_in_any_order(hard):
    forward = [hard[i].support_ids for i in range(20)]
    backward = [hard[i].support_ids for i in reversed(range(20))][::-1]
    for a, b in zip(forward, backward, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(hard[0].support_ids, hard[1].support_ids)


class _Ids(torch.utils.data.Dataset):
    def __init__(self, sampler):
        self.sampler = sampler

    def __len__(self):
        return 24

    def __getitem__(self, i):
        e = self.sampler[i]
        return torch.from_numpy(np.r_[e.concept, e.support_ids, e.query_ids])


def test_identical_with_dataloader_workers(hard):
    runs = []
    for workers in (0, 2):
        loader = torch.utils.data.DataLoader(_Ids(hard), batch_size=4, num_workers=workers)
        runs.append(torch.cat(list(loader)))
    assert torch.equal(runs[0], runs[1])


def test_concepts_follow_the_length_prior(tiny_bank):
    s = EpisodeSampler(tiny_bank, "instance_iid", "train", "easy", seed=0, size=4000)
    lengths = np.array([tiny_bank.lengths[s[i].concept] for i in range(4000)])
    w = np.exp(-0.2 * tiny_bank.lengths.astype(float))
    expected = (w * tiny_bank.lengths).sum() / w.sum()
    assert abs(lengths.mean() - expected) < 4 * lengths.std() / np.sqrt(len(lengths))


def test_sizes_and_errors(tiny_bank):
    assert len(EpisodeSampler(tiny_bank, "binding_color", "test")) == 20_000
    assert len(EpisodeSampler(tiny_bank, "binding_color", "train")) == 500_000
    s = EpisodeSampler(tiny_bank, "binding_color", "val", size=10)
    with pytest.raises(IndexError):
        s[10]
    with pytest.raises(ConfigError, match="negatives must be one of"):
        EpisodeSampler(tiny_bank, "binding_color", "test", negatives="medium")


# --- the fast sampler against a plain one -------------------------------------------------------
# `EpisodeSampler` is tuned (its own PCG64 seeding, bit tricks, no per-episode copies); this is
# the sampler written plainly (derive_rng, dense booleans, np.unique), with the same random
# draws in the same order. Any change to the episodes a seed gives shows up here.
def _plain_distinct(rng, n, k):
    if 4 * k > n:
        return rng.permutation(n)[:k]
    out = np.unique(rng.integers(0, n, size=2 * k))
    while len(out) < k:
        out = np.unique(np.concatenate([out, rng.integers(0, n, size=k)]))
    return rng.permutation(out)[:k]


def _plain_random_not_h(truth_h, used, k, rng):
    got, seen = [], set(used)
    while len(got) < k:
        for c in rng.integers(0, len(truth_h), size=2 * k + 8).tolist():
            if not truth_h[c] and c not in seen and len(got) < k:
                seen.add(c)
                got.append(c)
    return np.array(got, np.int64)


def _plain_negatives(s, dense, kind, h, positives, used, rng):
    if kind == "easy":
        return _plain_random_not_h(dense[h], used, s.num_negatives, rng), np.zeros(0, int)
    alternates = np.flatnonzero(dense[:, positives].all(1) & (np.arange(len(dense)) != h))
    pool = dense[alternates].any(0) & ~dense[h]
    chosen = []
    if len(alternates) > episodes._EXACT_MAX_ALTERNATES:  # rejection: 64 rounds of 64 scenes
        seen = set(used)
        for _ in range(64):
            for c in rng.integers(0, dense.shape[1], size=64).tolist():
                if pool[c] and c not in seen and len(chosen) < s.num_negatives:
                    seen.add(c)
                    chosen.append(c)
            if len(chosen) == s.num_negatives:
                break
        chosen = chosen if len(chosen) == s.num_negatives else []
    if len(chosen) < s.num_negatives and len(alternates):
        ids = np.setdiff1d(np.flatnonzero(pool), list(used))
        chosen = ids[_plain_distinct(rng, len(ids), min(len(ids), s.num_negatives))].tolist()
    if len(chosen) < s.num_negatives:
        short = s.num_negatives - len(chosen)
        chosen += _plain_random_not_h(dense[h], used | set(chosen), short, rng).tolist()
    return np.array(chosen, np.int64), alternates


def _plain_episode(s, dense, i):
    from curi.rng import derive_rng

    tag, npos = f"{s.split.name}:{s.subset}", s.num_positives
    rng = derive_rng(s.seed, f"episode:{tag}", i)
    w = np.exp(np.asarray(s.bank.log_prior, np.float64)[s.concepts])
    cum = np.cumsum(w / w.sum())
    h = int(s.concepts[min(int(np.searchsorted(cum, rng.random(), side="right")), len(cum) - 1)])
    pos = np.flatnonzero(dense[h])[_plain_distinct(rng, int(dense[h].sum()), 2 * npos)]
    neg_rng = derive_rng(s.seed, f"negatives:{tag}:{s.negatives}", i)
    used = set(pos.tolist())
    s_neg, s_alt = _plain_negatives(s, dense, s.negatives, h, pos[:npos], used, neg_rng)
    q_kind = "easy" if s.query_negatives == "random" else s.query_negatives
    q_neg, q_alt = _plain_negatives(s, dense, q_kind, h, pos[npos:], used | set(s_neg), neg_rng)
    labels = np.r_[np.ones(npos, np.int8), np.zeros(s.num_negatives, np.int8)]
    s_ids, q_ids = np.r_[pos[:npos], s_neg], np.r_[pos[npos:], q_neg]
    s_lab, q_lab = labels, labels
    if s.shuffle:
        order = derive_rng(s.seed, f"order:{tag}", i)
        sp, qp = order.permutation(len(s_ids)), order.permutation(len(q_ids))
        s_ids, s_lab, q_ids, q_lab = s_ids[sp], labels[sp], q_ids[qp], labels[qp]
    return h, s_ids, s_lab, q_ids, q_lab, s_alt, q_alt


@pytest.mark.parametrize(
    "split, subset, negatives, seed, kw, most_alternates",
    [
        ("concept_iid", "train", "hard", 3, {}, 32),
        ("concept_iid", "train", "hard", 3, {}, 3),  # the tiny bank's pools by rejection too
        ("concept_iid", "test", "easy", 0, {}, 32),
        ("instance_iid", "train", "hard", 5, {"query_negatives": "random"}, 32),
        ("binding_color", "val", "hard", 2**40, {"shuffle": False}, 32),  # seed over 32 bits
        ("concept_iid", "train", "hard", 7, {"num_positives": 3, "num_negatives": 30}, 8),
    ],
)
def test_same_episodes_as_the_plain_sampler(
    tiny_bank, dense, monkeypatch, split, subset, negatives, seed, kw, most_alternates
):
    monkeypatch.setattr(episodes, "_EXACT_MAX_ALTERNATES", most_alternates)
    s = EpisodeSampler(tiny_bank, split, subset, negatives, seed=seed, **kw)
    by_rejection = 0
    for i in [*range(40), len(s) - 1]:
        e, ref = s[i], _plain_episode(s, dense, i)
        got = (e.concept, e.support_ids, e.support_labels, e.query_ids, e.query_labels)
        got += (e.support_alternates, e.query_alternates)
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_array_equal(a, b)
        assert e.support_ids.dtype == e.query_ids.dtype == np.int64
        assert e.support_labels.dtype == np.int8
        by_rejection += len(e.support_alternates) > most_alternates
    assert by_rejection > (10 if most_alternates < 32 else -1)


@pytest.mark.parametrize(
    "negatives, sampler", [("hard", "paper"), ("easy", "paper"), ("hard", "matched")]
)
def test_episodes_draw_with_curi_pcg_not_numpy(tiny_bank, monkeypatch, negatives, sampler):
    """``sampler[i]`` draws with `curi.pcg` from its streams' states, as the batched path
    does, never with a numpy Generator (whose methods numpy may change): with
    `DerivedStream.rng` refused, episodes one by one still equal the batched ones."""
    from curi.rng import DerivedStream

    def refused(self, i):
        raise AssertionError("a numpy Generator drew an episode")

    monkeypatch.setattr(DerivedStream, "rng", refused)
    s = EpisodeSampler(
        tiny_bank, "concept_iid", "train", negatives, seed=4, negative_sampler=sampler
    )
    got = s.stacked(0, 30)
    for i in range(30):
        e = s[i]
        np.testing.assert_array_equal(got["support_ids"][i], e.support_ids)
        np.testing.assert_array_equal(got["query_ids"][i], e.query_ids)
        np.testing.assert_array_equal(got["query_labels"][i], e.query_labels)


def test_stream_state_is_the_generators_state():
    """`DerivedStream.state` (what `curi.pcg` draws from) is ``rng(i)``'s PCG64 state, in
    order, after a jump and past 32 bits."""
    from curi.pcg import integers
    from curi.rng import DerivedStream, derive_rng

    for seed in (0, 2**32 - 1, 2**40):
        stream = DerivedStream(seed, "negatives:x:hard", "test")
        for i in (0, 1, 2, 300, 5, 2**32 - 1, 2**32):
            out = np.empty(5, np.int64)
            integers(stream.state(i), 1000, out)
            want = derive_rng(seed, "negatives:x:hard", i).integers(0, 1000, 5)
            np.testing.assert_array_equal(out, want)


def test_streams_match_derive_rng():
    from curi.rng import DerivedStream, derive_rng

    for seed in (0, 3, 2**32 - 1, 2**32, 2**62):
        for purpose in ("episode:concept_iid:train", "negatives:x:hard", ""):
            stream = DerivedStream(seed, purpose, "test")
            for i in (0, 1, 77, 123_456, 2**32 - 1, 2**32, 10**12):
                a = stream.rng(i).integers(0, 2**63, 4)
                np.testing.assert_array_equal(a, derive_rng(seed, purpose, i).integers(0, 2**63, 4))


def test_streams_read_in_order_match_derive_rng():
    """Indices read in order take their states from blocks computed at once (`_states`):
    across a block's end, after a jump, and at the last 32-bit index."""
    from curi.rng import _BLOCK, DerivedStream, derive_rng

    for seed in (0, 2**32 - 1):
        stream = DerivedStream(seed, "negatives:x:hard", "test")
        order = [*range(_BLOCK + 3), 7, 8, 9, 2**32 - 2, 2**32 - 1, 2**32, 5]
        for i in order:
            a = stream.rng(i).integers(0, 2**63, 2)
            np.testing.assert_array_equal(
                a, derive_rng(seed, "negatives:x:hard", i).integers(0, 2**63, 2)
            )
        assert stream._states(2**32 - 3, 2**32) == [
            stream._state(i) for i in range(2**32 - 3, 2**32)
        ]


def test_bit_helpers_against_unpacking():
    from curi.bits import select_bits, set_bits

    rng = np.random.default_rng(0)
    for width in (1, 3, 64, 300):
        row = rng.integers(0, 2**63, width, dtype=np.int64).astype(np.uint64) << np.uint64(1)
        row[rng.random(width) < 0.5] = 0
        row[-1] |= np.uint64(6)
        where = np.flatnonzero(unpack_rows(row, 64 * width))
        np.testing.assert_array_equal(set_bits(row), where)
        ranks = rng.integers(0, len(where), 25)
        np.testing.assert_array_equal(select_bits(row, ranks), where[ranks])
        with pytest.raises(ValueError, match="rank out of range"):
            select_bits(row, [len(where)])


# --- negatives matched to the positives (negative_sampler="matched") ---------------------------
def _within(ids, scenes) -> bool:
    return set(np.asarray(ids).tolist()) <= set(np.asarray(scenes).tolist())


@pytest.mark.parametrize("kind", ["hard", "easy"])
def test_matched_negatives(tiny_bank, dense, hard, kind):
    from curi.episodes.sampler import _matched_keys

    key = _matched_keys(tiny_bank.scenes)
    plain = [16 * len(r["objects"]) + len({o["color"] for o in r["objects"]}) for r in
             tiny_bank.scene_records(np.arange(300))]  # fmt: skip
    assert key[:300].tolist() == plain
    s = EpisodeSampler(tiny_bank, "concept_iid", "train", kind, seed=3, negative_sampler="matched")
    paper = EpisodeSampler(
        tiny_bank, "concept_iid", "train", kind, seed=3, negative_sampler="paper"
    )
    matched = outside_pool = 0
    for i in range(80):
        e, p = s[i], paper[i]
        if kind == "hard":  # "paper" is the default: the pinned episodes
            np.testing.assert_array_equal(p.query_ids, hard[i].query_ids)
        h = e.concept
        _check_set(e.support_ids, e.support_labels, dense[h])  # negatives are still negatives
        _check_set(e.query_ids, e.query_labels, dense[h])
        everything = np.r_[e.support_ids, e.query_ids]
        assert len(set(everything.tolist())) == 50
        assert e.concept == p.concept  # the same concept and positives as the paper's
        np.testing.assert_array_equal(e.support_labels, p.support_labels)  # the same order
        for a, b, y in (
            (e.support_ids, p.support_ids, e.support_labels),
            (e.query_ids, p.query_ids, e.query_labels),
        ):
            np.testing.assert_array_equal(a[y == 1], b[y == 1])
        np.testing.assert_array_equal(e.query_alternates, p.query_alternates)
        negs_so_far = e.support_ids[e.support_labels == 0]
        sets = (
            (e.support_ids, e.support_labels, e.support_alternates, negs_so_far),
            (e.query_ids, e.query_labels, e.query_alternates, everything),
        )
        for ids, labels, alts, before in sets:
            pos, neg = ids[labels == 1], ids[labels == 0]
            want, got = np.sort(np.tile(key[pos], 4)), np.sort(key[neg])
            if np.array_equal(want, got):
                matched += 1
            else:  # only a key whose scenes outside h are all in the episode already
                short = [k for k in set(want.tolist()) if (want == k).sum() > (got == k).sum()]
                for k in short:
                    assert _within(np.flatnonzero((key == k) & ~dense[h]), everything)
            if kind == "hard" and len(alts):
                pool = dense[alts].any(0) & ~dense[h]
                for n in neg[~pool[neg]].tolist():  # the pool had no scene of its key left
                    outside_pool += 1
                    same = key == key[n] if key[n] in key[pos] else True  # else none at all
                    assert _within(np.flatnonzero(pool & same), before)
    assert matched >= 150  # of 160 sets
    assert outside_pool > 0 if kind == "hard" else outside_pool == 0  # a pool short of a key


def test_matched_sampler_name_is_checked(tiny_bank):
    with pytest.raises(ConfigError, match="negative_sampler must be one of"):
        EpisodeSampler(tiny_bank, "concept_iid", "test", negative_sampler="matched_counts")


@pytest.mark.parametrize(
    "split, subset, negatives, seed, kw, most_alternates, speculate, own",
    [
        ("concept_iid", "train", "hard", 3, {}, 32, 384, "some"),
        ("concept_iid", "train", "hard", 3, {}, 3, 384, "some"),  # pools by rejection too
        ("concept_iid", "train", "hard", 3, {}, 3, 64, "some"),  # rounds outrun the candidates
        ("concept_iid", "test", "easy", 0, {}, 32, 384, "none"),
        ("concept_iid", "test", "easy", 0, {}, 32, 60, "all"),
        ("instance_iid", "train", "hard", 5, {"query_negatives": "random"}, 5, 384, "some"),
        ("binding_color", "val", "hard", 2**40, {"shuffle": False}, 4, 384, "some"),
        (
            "concept_iid",
            "train",
            "hard",
            7,
            {"num_positives": 3, "num_negatives": 30},
            8,
            384,
            "some",
        ),
        ("concept_iid", "train", "easy", 1, {"negative_sampler": "matched"}, 32, 384, "all"),
    ],
)
def test_stacked_episodes_equal_one_by_one(
    tiny_bank,
    dense,
    monkeypatch,
    split,
    subset,
    negatives,
    seed,
    kw,
    most_alternates,
    speculate,
    own,
):
    """`EpisodeSampler.stacked` (the negatives' rounds run for all episodes together) gives
    the episodes of ``sampler[i]`` and of the plain sampler, whichever path each set takes;
    `own`: how many of the 120 sets are drawn one at a time (exact pools by
    `episodes.draws.exact_set`; rounds that outrun the candidates and the matched sampler by
    the sampler's own code), so the batched path is tested, not skipped."""
    from curi.episodes import batch as episode_batch

    monkeypatch.setattr(episodes, "_EXACT_MAX_ALTERNATES", most_alternates)
    monkeypatch.setattr(episode_batch, "_SPECULATE", speculate)
    s = EpisodeSampler(tiny_bank, split, subset, negatives, seed=seed, **kw)
    sets, plain = [], EpisodeSampler._negatives  # the sets the sampler's own code draws
    exact = episode_batch._Negatives._exact
    monkeypatch.setattr(
        EpisodeSampler, "_negatives", lambda self, *a: sets.append(a[1]) or plain(self, *a)
    )
    monkeypatch.setattr(
        episode_batch._Negatives, "_exact", lambda self, *a: sets.append(0) or exact(self, *a)
    )
    got = s.stacked(3, 63)
    monkeypatch.setattr(EpisodeSampler, "_negatives", plain)
    assert {"none": not sets, "all": len(sets) == 120, "some": 0 < len(sets) < 120}[own]
    for j, i in enumerate(range(3, 63)):
        e = s[i]
        one = (e.concept, e.support_ids, e.support_labels, e.query_ids, e.query_labels)
        keys = ("concept", "support_ids", "support_labels", "query_ids", "query_labels")
        for a, k in zip(one, keys, strict=True):
            np.testing.assert_array_equal(got[k][j], a)
            assert got[k].dtype == np.asarray(a).dtype
        if not s._matched:
            np.testing.assert_array_equal(got["support_ids"][j], _plain_episode(s, dense, i)[1])
    assert s.stacked(5, 5)["support_ids"].shape == (0, s.num_positives + s.num_negatives)
    with pytest.raises(IndexError):
        s.stacked(0, len(s) + 1)


def test_select_of_many_rows_equals_select_bits():
    """`episodes.draws.select` (every episode's ranks at once) equals `select_bits` row by
    row: full words, a lone bit in the last word, the first and last ranks of a row, ranks
    repeated and in any order."""
    from curi.bits import select_bits
    from curi.episodes.draws import select

    rng = np.random.default_rng(0)
    words = rng.integers(0, 2**63, (5, 7), dtype=np.int64).astype(np.uint64) << np.uint64(1)
    words[0] = np.uint64(2**64 - 1)
    words[1] = 0
    words[1, -1] = np.uint64(1 << 63)
    counts = np.bitwise_count(words).sum(1)
    h = np.array([0, 1, 2, 3, 4, 2, 0])
    ranks = np.stack([rng.integers(0, counts[c], 6) for c in h.tolist()])
    ranks[:, 0], ranks[:, 1] = 0, [counts[c] - 1 for c in h.tolist()]
    want = np.stack([select_bits(words[c], r) for c, r in zip(h.tolist(), ranks, strict=True)])
    np.testing.assert_array_equal(select(words, h, ranks), want)


def test_matched_batches_fall_back_to_the_reference_with_one_logged_line(tiny_bank, caplog):
    """The batched path draws paper negatives only: matched episodes are the reference
    sampler's, said once per sampler (not once per chunk), never refused."""
    import logging

    s = EpisodeSampler(tiny_bank, "concept_iid", "test", "hard", seed=2, negative_sampler="matched")
    with caplog.at_level(logging.INFO, logger="curi.episodes.batch"):
        a, b = s.stacked(0, 3), s.stacked(3, 6)
    said = [r for r in caplog.records if "negative_sampler=matched" in r.getMessage()]
    assert len(said) == 1
    np.testing.assert_array_equal(a["support_ids"][1], s[1].support_ids)
    np.testing.assert_array_equal(b["query_ids"][2], s[5].query_ids)
