"""Episode invariants, hard-negative pools checked by brute force, and determinism."""

import numpy as np
import pytest
import torch

from curi import ConfigError
from curi.bits import unpack_rows
from curi.episodes import EpisodeSampler


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
