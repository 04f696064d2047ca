"""The device sampler (`curi.models.device_sampler`, `curi.models.device_matched`) on CPU
tensors: every episode valid, the same distribution as `curi.EpisodeSampler` (chi-square tests
at p > 1e-3, seeded, with a control that a biased draw fails them), deterministic per step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from curi.bits import set_bits
from curi.episodes import EpisodeSampler, EpisodeSpec
from curi.models.device_batches import DRAW_EPISODES, DrawnEpisodes, steps_per_draw
from curi.models.device_sampler import DeviceBank, DeviceEpisodeSampler
from curi.pcg import states_of

pytestmark = pytest.mark.usefixtures("one_torch_thread")

P_MIN = 1e-3  # every distribution test passes at this level; the biased control fails at 1e-6


@pytest.fixture(scope="module")
def data(tiny_bank):
    return DeviceBank(tiny_bank, "cpu")


def _sampler(bank, data, negatives="hard", **kw):
    spec = EpisodeSpec("concept_iid", "train", negatives, seed=3, **kw)
    return DeviceEpisodeSampler(bank, spec, data=data)


def _alternates(bank, h, positives):
    """The concepts other than h true on every positive (numpy, as the paper says)."""
    alt = np.bitwise_and.reduce(bank.truth_by_scene[positives], 0)
    alt[h >> 6] &= ~np.uint64(1 << (h & 63))
    return set_bits(alt)


def _pool(bank, h, positives, used):
    """The hard pool of one set less `used`, and the alternates."""
    alternates = _alternates(bank, h, positives)
    if not len(alternates):
        return np.zeros(0, np.int64), alternates
    bits = np.bitwise_or.reduce(bank.truth_words[alternates], 0) & ~bank.truth_words[h]
    pool = set_bits(bits)
    return np.setdiff1d(pool, np.fromiter(used, np.int64)), alternates


def _check_set(bank, kind, h, ids, labels, used, keys=None):
    """One set's labels, and its hard negatives drawn from the pool (of each key, when
    matched) while it lasts."""
    truth = bank.truth(h)
    pos, neg = ids[labels == 1], ids[labels == 0]
    assert truth[pos].all() and not truth[neg].any()
    if kind != "hard":
        return
    pool, _ = _pool(bank, h, pos, used)
    groups = [(pool, neg)]
    if keys is not None:
        want = keys[pos][np.arange(len(neg)) % len(pos)]
        groups = [(pool[keys[pool] == k], neg[keys[neg] == k]) for k in set(want.tolist())]
    for pool_k, neg_k in groups:
        if len(pool_k) >= len(neg_k):
            assert np.isin(neg_k, pool_k).all()
        else:  # all of the pool, then other scenes outside h
            assert np.isin(pool_k, neg_k).all()


@pytest.mark.parametrize(
    "negatives,kw",
    [
        ("hard", {}),
        ("easy", {}),
        ("hard", {"query_negatives": "random"}),
        ("hard", {"negative_sampler": "matched"}),
        ("easy", {"negative_sampler": "matched"}),
    ],
)
def test_every_episode_is_valid(tiny_bank, data, negatives, kw):
    s = _sampler(tiny_bank, data, negatives, **kw)
    b = {k: v.numpy() for k, v in s.sample(7, 200).items()}
    assert b["ids"].shape == (200, 50) and b["support_labels"].shape == (200, 25)
    assert set(b["concept"].tolist()) <= set(s.reference.concepts.tolist())
    keys = s.reference.scene_keys
    for e in range(200):
        ids, h = b["ids"][e], int(b["concept"][e])
        assert len(set(ids.tolist())) == 50
        sup, qry = ids[:25], ids[25:]
        s_lab, q_lab = b["support_labels"][e], b["query_labels"][e]
        assert s_lab.sum() == 5 and q_lab.sum() == 5
        positives = set(sup[s_lab == 1].tolist()) | set(qry[q_lab == 1].tolist())
        q_kind = "easy" if kw.get("query_negatives") == "random" else negatives
        _check_set(tiny_bank, negatives, h, sup, s_lab, positives, keys)
        q_used = positives | set(sup[s_lab == 0].tolist())
        _check_set(tiny_bank, q_kind, h, qry, q_lab, q_used, keys)
        if keys is not None:  # negative j has the key of positive j mod 5 (as a multiset)
            for ids_, lab in ((sup, s_lab), (qry, q_lab)):
                want = np.sort(np.tile(keys[ids_[lab == 1]], 4))
                outside = ~tiny_bank.truth(h)
                short = any((keys[outside] == k).sum() < 30 for k in set(want.tolist()))
                assert short or (np.sort(keys[ids_[lab == 0]]) == want).all()


def test_a_step_is_a_pure_function_of_seed_step_and_rank(tiny_bank, data):
    s = _sampler(tiny_bank, data)
    a, b = s.sample(11, 16), s.sample(11, 16)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["ids"], s.sample(12, 16)["ids"])
    assert not torch.equal(a["ids"], s.sample(11, 16, rank=1)["ids"])
    other = _sampler(tiny_bank, data)  # a new sampler (a resumed run) draws the same
    assert torch.equal(other.sample(11, 16)["ids"], a["ids"])


def test_steps_drawn_together_are_slices_of_one_draw_and_resume_mid_draw(tiny_bank, data):
    s = _sampler(tiny_bank, data)

    def steps(start: int) -> list[dict]:
        it = DrawnEpisodes(s, 4, start=start, stop=8, max_len=64, steps_per_draw=3)
        return list(it)

    whole, resumed = steps(0), steps(4)  # step 4 is in the middle of draw 1 (steps 3-5)
    block = s.sample(1, 12)
    for t in (3, 4, 5):
        at = (t - 3) * 4
        assert torch.equal(whole[t]["ids"], block["ids"][at : at + 4])
    for t in range(4, 8):
        assert all(torch.equal(whole[t][k], resumed[t - 4][k]) for k in whole[t])
    assert whole[2]["concept_tokens"].shape == (4, 64)
    assert not torch.equal(whole[3]["ids"], whole[4]["ids"])
    assert steps_per_draw(256, torch.device("cpu")) == 1
    assert steps_per_draw(256, torch.device("cuda")) == DRAW_EPISODES // 256
    assert steps_per_draw(10 * DRAW_EPISODES, torch.device("cuda")) == 1


def _two_sample(a: np.ndarray, b: np.ndarray, *, min_expected: float = 5.0) -> float:
    """p-value of a chi-square test that counts a and b (over the same bins) come from one
    distribution; bins too thin for the test are pooled into one."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    thin = (a + b) / 2 < min_expected
    table = np.stack([a[~thin], b[~thin]], 1)
    if thin.any():
        table = np.vstack([table, [a[thin].sum(), b[thin].sum()]])
    table = table[table.sum(1) > 0]
    return stats.chi2_contingency(table.T)[1]


def test_concepts_follow_the_reference_prior(tiny_bank, data):
    s = _sampler(tiny_bank, data)
    ref = EpisodeSampler(tiny_bank, "concept_iid", "train", "hard", seed=5, size=2000)
    index = {int(c): i for i, c in enumerate(ref.concepts)}
    dev = np.bincount([index[int(c)] for c in s.sample(0, 2000)["concept"]], minlength=len(index))
    want = np.bincount([index[ref[i].concept] for i in range(2000)], minlength=len(index))
    assert _two_sample(dev, want) > P_MIN
    # and against the prior itself, with 20x the draws
    gen = torch.Generator().manual_seed(0)
    many = s._concepts(60_000, gen).numpy()
    counts = np.bincount([index[int(c)] for c in many], minlength=len(index))
    prior = np.diff(np.r_[0.0, ref.prior_cdf]) * len(many)
    assert _two_sample(counts, prior / prior.sum() * counts.sum()) > P_MIN


def test_positives_are_uniform_over_the_concepts_scenes(tiny_bank, data):
    s = _sampler(tiny_bank, data)
    counts = np.asarray(tiny_bank.counts)[s.reference.concepts]
    h = int(s.reference.concepts[np.flatnonzero((counts >= 30) & (counts <= 60))[0]])
    scenes = set_bits(np.asarray(tiny_bank.truth_words[h]))
    pos = s._positives(torch.full((4000,), h), torch.Generator().manual_seed(1)).numpy()
    assert np.isin(pos, scenes).all() and all(len(set(r)) == 10 for r in pos.tolist())
    where = np.searchsorted(scenes, pos)
    for slots in (slice(None), slice(0, 1), slice(9, 10)):  # all, and single positions
        freq = np.bincount(where[:, slots].ravel(), minlength=len(scenes))
        assert stats.chisquare(freq).pvalue > P_MIN


def _conditional(s, ref, kind, h, positives, used, n=1500):
    """Negatives of one set drawn n times by the device sampler and by the reference."""
    row = np.asarray(ref.bank.truth_words[h])
    st = np.random.PCG64(0).state["state"]
    state = states_of([(st["state"], st["inc"])])[0]  # curi.pcg's draws, advanced by each set
    taken = np.fromiter(used, np.int64)
    want = np.concatenate(
        [ref._negatives(kind, h, row, positives, taken, state)[0] for _ in range(n)]
    )
    t = torch.as_tensor
    got = s.negatives_of(
        kind,
        t([h] * n),
        t(np.tile(positives, (n, 1))),
        t(np.tile(np.fromiter(used, np.int64), (n, 1))),
        torch.Generator().manual_seed(2),
    )
    return got.numpy().ravel(), want


def _find_set(bank, s, lo, hi, *, many_alternates):
    """An episode's support positives and `used` whose hard pool has lo..hi scenes."""
    ref = EpisodeSampler(bank, "concept_iid", "train", "hard", seed=9, size=5000)
    for i in range(5000):
        e = ref[i]
        pos = e.support_ids[e.support_labels == 1]
        used = set(pos.tolist()) | set(e.query_ids[e.query_labels == 1].tolist())
        pool, alternates = _pool(bank, e.concept, pos, used)
        if lo <= len(pool) <= hi and (len(alternates) > 32) == many_alternates:
            return e.concept, pos, used, pool
    raise AssertionError("no such episode in the tiny bank")


@pytest.mark.parametrize("many_alternates,lo,hi", [(False, 25, 120), (True, 1000, 8000)])
def test_hard_negatives_match_the_reference(tiny_bank, data, many_alternates, lo, hi):
    s = _sampler(tiny_bank, data)
    h, pos, used, pool = _find_set(tiny_bank, s, lo, hi, many_alternates=many_alternates)
    got, want = _conditional(s, s.reference, "hard", h, pos, used, n=2000)
    assert np.isin(got, pool).all() and np.isin(want, pool).all()
    a = np.bincount(np.searchsorted(pool, got), minlength=len(pool))
    b = np.bincount(np.searchsorted(pool, want), minlength=len(pool))
    assert _two_sample(a, b) > P_MIN
    assert stats.chisquare(a).pvalue > P_MIN  # uniform over the pool
    # the control: a draw that never takes the pool's last tenth is caught
    biased = pool[np.searchsorted(pool, got) % (len(pool) - len(pool) // 10)]
    c = np.bincount(np.searchsorted(pool, biased), minlength=len(pool))
    assert _two_sample(c, b) < 1e-6


@pytest.mark.parametrize("sampler", ["paper", "matched"])
def test_easy_and_matched_negatives_match_the_reference(tiny_bank, data, sampler):
    s = _sampler(tiny_bank, data, negative_sampler=sampler)
    ref = s.reference
    e = EpisodeSampler(tiny_bank, "concept_iid", "train", "hard", seed=3, size=5)[4]
    pos = e.support_ids[e.support_labels == 1]
    used = set(pos.tolist()) | set(e.query_ids[e.query_labels == 1].tolist())
    for kind in ("easy", "hard"):
        got, want = _conditional(s, ref, kind, e.concept, pos, used, n=1000)
        bins = np.linspace(0, tiny_bank.num_scenes, 41)  # scenes by id, 40 bins
        a, b = np.histogram(got, bins)[0], np.histogram(want, bins)[0]
        assert _two_sample(a, b) > P_MIN
        if sampler == "matched":  # and by key
            keys = ref.scene_keys
            top = int(keys.max()) + 1
            ka, kb = np.bincount(keys[got], minlength=top), np.bincount(keys[want], minlength=top)
            assert _two_sample(ka, kb) > P_MIN


def test_whole_episodes_match_the_reference(tiny_bank, data):
    """Whole episodes against the reference's: the object count of a hard negative and the
    number of the set's alternates it satisfies, one negative per episode (the negatives of
    an episode are not independent draws; the first in the set's random order is a random
    one)."""
    n = 2500
    s = _sampler(tiny_bank, data)
    ref = EpisodeSampler(tiny_bank, "concept_iid", "train", "hard", seed=11, size=n)
    n_obj = np.asarray(tiny_bank.scenes.n_objects)

    def stats_of(episodes):
        objects, hits = [], []
        for h, ids, lab in episodes:
            x = int(ids[lab == 0][0])
            alternates = _alternates(tiny_bank, h, ids[lab == 1])
            objects.append(n_obj[x])
            bits = np.asarray(tiny_bank.truth_words[alternates][:, x >> 6]) >> np.uint64(x & 63)
            hits.append(min(int((bits & np.uint64(1)).sum()), 30))
        return np.bincount(objects, minlength=6), np.bincount(hits, minlength=31)

    b = s.sample(0, n)
    ids, labels = b["ids"][:, :25].numpy(), b["support_labels"].numpy()
    sup = zip(b["concept"].tolist(), ids, labels, strict=True)
    theirs = ((e.concept, e.support_ids, e.support_labels) for e in map(ref.__getitem__, range(n)))
    for a, c in zip(stats_of(sup), stats_of(theirs), strict=True):
        assert _two_sample(a, c) > P_MIN


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("negatives", ["hard", "easy"])
def test_on_cuda_every_episode_is_valid(tiny_bank, negatives):
    spec = EpisodeSpec("concept_iid", "train", negatives, seed=3)
    s = DeviceEpisodeSampler(tiny_bank, spec, device="cuda")
    b = s.sample(7, 256)
    assert all(v.is_cuda for v in b.values())
    b = {k: v.cpu().numpy() for k, v in b.items()}
    for e in range(256):
        ids, h = b["ids"][e], int(b["concept"][e])
        sup, qry = ids[:25], ids[25:]
        s_lab, q_lab = b["support_labels"][e], b["query_labels"][e]
        assert len(set(ids.tolist())) == 50
        positives = set(sup[s_lab == 1].tolist()) | set(qry[q_lab == 1].tolist())
        _check_set(tiny_bank, negatives, h, sup, s_lab, positives)
        _check_set(tiny_bank, negatives, h, qry, q_lab, positives | set(sup[s_lab == 0].tolist()))


def test_a_bank_too_big_for_the_gpu_is_one_line(tiny_bank, monkeypatch):
    from curi.errors import ConfigError
    from curi.models import device_sampler

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2**20, 2**30))
    with pytest.raises(ConfigError, match=r"need .* GiB on cuda but 0.0 GiB are free; use train"):
        device_sampler._check_fits(tiny_bank, torch.device("cuda"))
