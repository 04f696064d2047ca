"""Bit rows on a torch device (`curi.models.device_bits`) against the numpy ones of `curi.bits`."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from scipy import stats

from curi.bits import select_bits as select_np
from curi.bits import set_bits
from curi.models.device_bits import (
    bits_at,
    clear_bits,
    distinct_ranks,
    first_occurrence,
    list_bits,
    or_rows,
    popcount,
    select_bits,
    swar_popcount,
)

RNG = np.random.default_rng(0)
WORDS = RNG.integers(0, 2**64, size=(9, 40), dtype=np.uint64)
WORDS[0] = 0
WORDS[0, 3] = np.uint64(1 << 63)  # the sign bit of an int64 word
WORDS[1] = np.uint64(2**64 - 1)
T = torch.from_numpy(WORDS.view(np.int64))


def test_popcount_and_select_equal_numpy():
    assert (popcount(T).numpy() == np.bitwise_count(WORDS)).all()
    assert (swar_popcount(T).numpy() == np.bitwise_count(WORDS)).all()  # the CUDA path
    counts = np.bitwise_count(WORDS).sum(1)
    ranks = np.stack([RNG.integers(0, c, 6) for c in counts])
    ranks[:, 0] = counts - 1  # the last set bit
    ranks[2, 1] = -1
    got = select_bits(T, torch.from_numpy(ranks)).numpy()
    for b, j in itertools.product(range(len(WORDS)), range(6)):
        want = -1 if ranks[b, j] < 0 else select_np(WORDS[b], ranks[b, j : j + 1])[0]
        assert got[b, j] == want


def test_list_or_clear_and_test_bits():
    listed = list_bits(T, limit=70).numpy()
    for b in range(len(WORDS)):
        want = set_bits(WORDS[b])[:70]
        assert (listed[b, : len(want)] == want).all() and (listed[b, len(want) :] == -1).all()
    index = torch.tensor([[2, 5, 7], [4, -1, -1], [-1, -1, -1]])
    ored = or_rows(T, index).numpy().view(np.uint64)
    assert (ored[0] == WORDS[2] | WORDS[5] | WORDS[7]).all() and (ored[1] == WORDS[4]).all()
    assert (ored[2] == 0).all()
    ids = torch.tensor([[0, 63, 64 * 39 + 63], [5, 6, -1]])
    cleared = clear_bits(T[1:3].clone(), ids)
    assert not bits_at(cleared, ids).any()
    assert bits_at(T[1:2], ids[:1]).all()  # row 1 has every bit
    kept = cleared.numpy().view(np.uint64)[0]
    assert np.bitwise_count(kept).sum() == 64 * 40 - 3


def test_distinct_ranks_are_uniform_subsets_in_uniform_order():
    gen = torch.Generator().manual_seed(0)
    n = 7
    draws = distinct_ranks(torch.full((35_000,), n), torch.full((35_000,), 3), 4, gen).numpy()
    assert (draws[:, 3] == -1).all() and (draws[:, :3] >= 0).all()
    assert all(len(set(r)) == 3 for r in draws[:, :3].tolist())
    subsets = [tuple(sorted(r)) for r in draws[:, :3].tolist()]
    index = {s: i for i, s in enumerate(itertools.combinations(range(n), 3))}
    counts = np.bincount([index[s] for s in subsets], minlength=len(index))
    assert stats.chisquare(counts).pvalue > 1e-3  # all 35 subsets alike
    for j in range(3):  # and each position uniform
        assert stats.chisquare(np.bincount(draws[:, j], minlength=n)).pvalue > 1e-3
    few = distinct_ranks(torch.tensor([2, 5]), torch.tensor([2, 0]), 3, gen).numpy()
    assert sorted(few[0, :2].tolist()) == [0, 1] and (few[1] == -1).all()


def test_first_occurrence():
    got = first_occurrence(torch.tensor([[4, 2, 4, 3, 2, 2]]))
    assert got.tolist() == [[True, True, False, True, False, False]]
