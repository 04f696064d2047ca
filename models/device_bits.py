"""Bit-packed rows on a torch device: the operations `curi.models.device_sampler` draws
episodes with, vectorised over a batch of rows. Rows are little-endian 64-bit words as in
`curi.bits` (bit s of a row is scene s), held as int64 (torch has no uint64 arithmetic; the
bit patterns are the same). Every function runs on the CPU and on CUDA alike."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "bit_masks",
    "bits_at",
    "clear_bits",
    "distinct_ranks",
    "first_occurrence",
    "list_bits",
    "or_rows",
    "popcount",
    "select_bits",
    "swar_popcount",
]

_M1, _M2, _M4 = 0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F
_H01 = 0x0101010101010101
_BITS = torch.arange(64)


def _signed(c: int) -> int:
    """`c` (a 64-bit pattern) as the int64 with the same bits."""
    return c - (1 << 64) if c >= 1 << 63 else c


def popcount(x: Tensor) -> Tensor:
    """Set bits of each int64 word. On the CPU, numpy's (the processor's popcount
    instruction); elsewhere SWAR arithmetic (Hacker's Delight 5-2: the arithmetic shifts are
    masked, so the sign bit counts as any other), in place on one temporary."""
    if x.device.type == "cpu":
        return torch.from_numpy(np.bitwise_count(x.numpy().view(np.uint64)))  # uint8
    return swar_popcount(x)


def swar_popcount(x: Tensor) -> Tensor:
    """`popcount` by int64 arithmetic, on any device (the CUDA path of `popcount`)."""
    y = x - ((x >> 1) & _M1)
    t = (y >> 2).bitwise_and_(_M2)
    y.bitwise_and_(_M2).add_(t)
    y.add_(y >> 4).bitwise_and_(_M4)
    return y.mul_(_H01).bitwise_right_shift_(56)  # the top byte holds the count (< 128)


def bit_masks(ids: Tensor) -> Tensor:
    """The word ``1 << (id % 64)`` of each id (int64, bit 63 as the sign bit)."""
    return torch.ones_like(ids) << (ids & 63)


def bits_at(rows: Tensor, ids: Tensor) -> Tensor:
    """Bit `ids` of each row: rows (B, W) and ids (B, ...) -> bool (B, ...); ids < 0 are False."""
    safe = ids.clamp(min=0)
    words = torch.gather(rows, 1, (safe >> 6).reshape(len(rows), -1)).reshape(ids.shape)
    return ((words >> (safe & 63)) & 1).bool() & (ids >= 0)


def clear_bits(rows: Tensor, ids: Tensor) -> Tensor:
    """Rows (B, W) with bits `ids` (B, U) cleared (ids < 0 ignored; the ids of a row must be
    distinct, so their masks add up to their OR)."""
    safe = ids.clamp(min=0)
    masks = torch.where(ids >= 0, bit_masks(safe), 0)
    cleared = torch.zeros_like(rows).scatter_add_(1, safe >> 6, masks)  # (B, W)
    return rows & ~cleared


def select_bits(rows: Tensor, ranks: Tensor, *, cum: Tensor | None = None) -> Tensor:
    """Positions of the set bits of rank `ranks` (0-based) in each row: rows (B, W), ranks
    (B, K) -> (B, K) int64; a rank < 0 gives -1. The rank's word is found in the cumulative
    popcount of the row (`cum`, (B, W), when the caller has it), the bit in the word by a
    cumulative sum over its 64 bits.

    Ranks must be below the row's popcount (not checked: the samplers draw them so)."""
    if cum is None:
        cum = popcount(rows).cumsum(1)  # (B, W)
    r = ranks.clamp(min=0)
    word = torch.searchsorted(cum, r, right=True).clamp(max=rows.shape[1] - 1)  # (B, K)
    before = torch.where(word > 0, torch.gather(cum, 1, (word - 1).clamp(min=0)), 0)
    x = torch.gather(rows, 1, word)  # (B, K)
    bits = (x[..., None] >> _BITS.to(x.device)) & 1  # (B, K, 64)
    pos = (bits.cumsum(-1) <= (r - before)[..., None]).sum(-1)  # (B, K)
    return torch.where(ranks >= 0, word * 64 + pos, -1)


def list_bits(rows: Tensor, *, limit: int) -> Tensor:
    """The first `limit` set bits of each row, ascending, padded with -1: rows (B, W) ->
    (B, limit) int64."""
    n = popcount(rows).sum(1)  # (B,)
    ranks = torch.arange(limit, device=rows.device).expand(len(rows), limit)
    return select_bits(rows, torch.where(ranks < n[:, None], ranks, -1))


def or_rows(table: Tensor, index: Tensor) -> Tensor:
    """OR of rows `index` (B, A) of `table` (R, W) per batch row -> (B, W); the valid indices
    of a row come first, then -1 (as `list_bits` gives them). The batch rows are sorted by
    their number of valid indices, so column a is OR-ed in place into a prefix of them: no
    (B, A, W) copy, and no row gathered in vain."""
    count = (index >= 0).sum(1)
    order = count.argsort(descending=True)
    index = index[order]
    prefix = count[order][None, :] > torch.arange(index.shape[1], device=index.device)[:, None]
    out = torch.zeros(len(index), table.shape[1], dtype=table.dtype, device=table.device)
    rows = torch.empty_like(out)  # one buffer for every column's rows
    for a, k in enumerate(prefix.sum(1).tolist()):  # the rows with an a-th index: a prefix
        if not k:
            break
        out[:k] |= torch.index_select(table, 0, index[:k, a], out=rows[:k])
    return out[order.argsort()]


def distinct_ranks(n: Tensor, k: Tensor, kmax: int, generator: torch.Generator) -> Tensor:
    """For each row, `k` distinct integers drawn uniformly from ``[0, n)``, in uniformly
    random order, padded with -1 to `kmax` columns: n, k (B,) int64 with k <= min(n, kmax)
    -> (B, kmax).

    Floyd's algorithm draws a uniform k-subset with k draws (no rejection loop: a fixed
    number of steps, whatever the data); a random sort of the chosen then gives the order."""
    b, dev = len(n), n.device
    out = torch.full((b, kmax), -1, dtype=torch.int64, device=dev)
    u = torch.rand(b, kmax, dtype=torch.float64, device=dev, generator=generator)
    for i in range(kmax):
        j = n - k + i  # (B,) Floyd's j runs over n - k .. n - 1
        t = (u[:, i] * (j + 1)).long().minimum(j)  # uniform on [0, j]
        taken = (out[:, :i] == t[:, None]).any(1)
        out[:, i] = torch.where(i < k, torch.where(taken, j, t), -1)
    keys = torch.rand(b, kmax, device=dev, generator=generator)
    keys = torch.where(out >= 0, keys, 2.0)  # the drawn first, in random order
    return torch.gather(out, 1, keys.argsort(1))


def first_occurrence(ids: Tensor) -> Tensor:
    """Whether each entry of ids (B, M) is the first of its value in its row (bool (B, M)):
    a stable sort puts the first of equal values first."""
    values, order = ids.sort(dim=1, stable=True)
    first = torch.ones_like(ids, dtype=torch.bool)
    first[:, 1:] = values[:, 1:] != values[:, :-1]
    return torch.empty_like(first).scatter_(1, order, first)
