"""Bit-packed boolean rows: packing, unpacking, popcount and selecting the k-th set bit.
Rows are little-endian uint64 words (bit s of a row is scene s), as `np.packbits(...,
bitorder="little")` lays them out; torch tensors hold the same bits as int64."""

from __future__ import annotations

import numpy as np

__all__ = ["pack_rows", "unpack_rows", "popcount", "select_bits", "num_words", "transpose_blocks"]

_POP8 = np.array([bin(i).count("1") for i in range(256)], np.int64)


def num_words(n: int) -> int:
    """Words needed for n bits."""
    return -(-n // 64)


def pack_rows(bits: np.ndarray) -> np.ndarray:
    """Pack booleans (..., N) into little-endian uint64 words (..., ceil(N / 64))."""
    bits = np.asarray(bits, dtype=bool)
    pad = (-bits.shape[-1]) % 64
    if pad:
        bits = np.concatenate([bits, np.zeros(bits.shape[:-1] + (pad,), bool)], axis=-1)
    packed = np.packbits(bits, axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8")


def unpack_rows(words: np.ndarray, num_bits: int) -> np.ndarray:
    """Boolean matrix (..., num_bits) from little-endian words (..., W)."""
    w = np.ascontiguousarray(words).view(np.uint8)
    # unpackbits yields 0/1 bytes, which are valid booleans: view, don't copy
    return np.unpackbits(w, axis=-1, bitorder="little")[..., :num_bits].view(bool)


def popcount(words, axis: int = -1):
    """Number of set bits along `axis` of uint64 (numpy) or int64 (torch) words."""
    if isinstance(words, np.ndarray):
        return np.bitwise_count(words).sum(axis=axis, dtype=np.int64)
    import torch

    table = torch.as_tensor(_POP8, device=words.device)
    bytes_ = words.contiguous().view(torch.uint8).reshape(*words.shape, 8).long()
    return table[bytes_].sum(-1).sum(axis)


def select_bits(row: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Positions of the set bits of rank `ranks` (0-based) in one packed row.

    Vectorised: a cumulative popcount over words finds each rank's word, then the bit inside
    it. Cost O(W + len(ranks)) instead of unpacking the whole row.

    Raises:
        ValueError: a rank is not below the row's popcount.
    """
    ranks = np.asarray(ranks, dtype=np.int64)
    cum = np.cumsum(np.bitwise_count(row), dtype=np.int64)
    if ranks.size and (ranks.min() < 0 or ranks.max() >= (cum[-1] if cum.size else 0)):
        raise ValueError("rank out of range of the row's set bits")
    word = np.searchsorted(cum, ranks, side="right")
    before = np.where(word > 0, cum[word - 1], 0)
    bits = np.unpackbits(row[word].view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    offs = np.cumsum(bits, axis=1) - 1  # rank within the word at each bit position
    inner = np.argmax((offs == (ranks - before)[:, None]) & (bits == 1), axis=1)
    return word * 64 + inner


def transpose_blocks(words: np.ndarray, num_cols: int, *, block: int = 64):
    """Transpose a packed bit matrix (R, ceil(num_cols / 64)) block by block.

    Yields packed blocks of the transpose, (<= 64 * block, ceil(R / 64)) each, in order; their
    concatenation is the (num_cols, ceil(R / 64)) transpose. Memory: R x 64 x block booleans.
    """
    n_words = words.shape[1]
    for w0 in range(0, n_words, block):
        w1 = min(w0 + block, n_words)
        bits = unpack_rows(np.asarray(words[:, w0:w1]), (w1 - w0) * 64)  # (R, 64 b)
        n_here = min((w1 - w0) * 64, num_cols - w0 * 64)
        yield pack_rows(bits[:, :n_here].T)
