"""Bit-packed boolean rows: packing, unpacking, popcount and selecting the k-th set bit.
Rows are little-endian uint64 words (bit s of a row is scene s), as `np.packbits(...,
bitorder="little")` lays them out; torch tensors hold the same bits as int64."""

from __future__ import annotations

import numpy as np

__all__ = [
    "pack_rows",
    "unpack_rows",
    "popcount",
    "select_bits",
    "set_bits",
    "set_bits_rows",
    "num_words",
    "transpose_blocks",
    "transpose_bytes",
    "byte_codes",
]

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


def set_bits(row: np.ndarray) -> np.ndarray:
    """Positions of the set bits of one packed row, ascending (int64). A long row has only its
    nonzero words unpacked."""
    if len(row) <= 256:  # (flatnonzero is fastest on booleans)
        return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little").view(bool))
    nz = np.flatnonzero(row)
    at = np.flatnonzero(np.unpackbits(row[nz].view(np.uint8), bitorder="little").view(bool))
    return nz[at >> 6] * 64 + (at & 63)


def set_bits_rows(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, position) of every set bit of packed rows (R, W), row by row, ascending; only
    the nonzero bytes are unpacked."""
    a = np.ascontiguousarray(words).view(np.uint8)  # (R, 8 W): bit j of byte c is 8 c + j
    r, c = np.nonzero(a)
    k, b = np.nonzero(np.unpackbits(a[r, c][:, None], 1, bitorder="little"))
    return r[k], c[k] * 8 + b


def select_bits(row: np.ndarray, ranks: np.ndarray, *, cum: np.ndarray | None = None) -> np.ndarray:
    """Positions of the set bits of rank `ranks` (0-based) in one packed row.

    Vectorised: a cumulative popcount over words finds each rank's word, then the bit inside
    it. Cost O(W + len(ranks)) instead of unpacking the whole row.

    Args:
        row: (W,) uint64 words.
        ranks: (K,) ranks.
        cum: ``np.cumsum(np.bitwise_count(row))`` (int64, or int32 when the row's popcount
            fits) when the caller has it already (it needs the row's popcount first, as
            episodes do).

    Raises:
        ValueError: a rank is not below the row's popcount.
    """
    ranks = np.asarray(ranks, dtype=np.int64)
    if cum is None:
        cum = np.bitwise_count(row).cumsum(dtype=np.int64)
    listed = ranks.tolist()  # (a few ranks: Python's min and max beat two reductions)
    if listed and (min(listed) < 0 or max(listed) >= (int(cum[-1]) if cum.size else 0)):
        raise ValueError("rank out of range of the row's set bits")
    # (methods, not np.* wrappers; ranks in cum's dtype: an int32 cum is searched uncopied)
    word = cum.searchsorted(ranks.astype(cum.dtype, copy=False), side="right")
    words = row[word]
    # the set bits of all the chosen words in one list, word after word: the bit of rank r in
    # word j (r counted over the whole row) is entry r - (bits of the row before word j)
    # + (bits of the chosen words before j)
    at = np.unpackbits(words.view(np.uint8), bitorder="little").view(bool).nonzero()[0]
    before_chosen = np.bitwise_count(words).cumsum(dtype=np.int64)
    return word * 64 + (at[ranks - cum[word] + before_chosen] & 63)


_DELTA_SWAPS = tuple(
    (np.uint64(shift), np.uint64(mask))
    for shift, mask in ((7, 0x00AA00AA00AA00AA), (14, 0x0000CCCC0000CCCC), (28, 0x00000000F0F0F0F0))
)
_CHUNK = 1 << 16  # words per in-place pass: the chunk and its scratch stay in cache


def _transpose8_(x: np.ndarray) -> np.ndarray:
    """Transpose, in place, the 8 x 8 bit matrices held in contiguous uint64 words (bit 8 r + c
    -> bit 8 c + r), by three delta swaps (Hacker's Delight, 7-3). In-place passes over
    cache-sized chunks run about 4x faster than allocating a temporary per operation."""
    if not x.flags.c_contiguous:
        raise ValueError("_transpose8_ works in place: x must be C-contiguous")
    flat = x.reshape(-1)
    scratch = np.empty(min(_CHUNK, flat.size), np.uint64)
    for a in range(0, flat.size, _CHUNK):
        v = flat[a : a + _CHUNK]
        t = scratch[: len(v)]
        for s, m in _DELTA_SWAPS:
            np.right_shift(v, s, out=t)
            t ^= v
            t &= m
            v ^= t
            t <<= s
            v ^= t
    return x


def byte_codes(words: np.ndarray, num_cols: int) -> np.ndarray:
    """The columns of a packed bit matrix, one byte per block of 8 rows: (ceil(R / 8),
    num_cols) uint8, bit k of ``out[b, c]`` = row 8 b + k at column c (rows past R read as 0).
    `words` is (R, ceil(num_cols / 64)) little-endian uint64 words or (R, ceil(num_cols / 8))
    bytes: either way bit j of byte b is column 8 b + j. Scoring a column by per-block byte
    tables then needs one look-up per block, and no (R, num_cols) boolean matrix is
    materialised."""
    a = np.ascontiguousarray(words).view(np.uint8)  # (R, B)
    r8, nb = -(-a.shape[0] // 8), a.shape[1]
    # x[g, b]: the bytes of rows 8g..8g+7 in byte column b, as one word (byte k = row 8g+k);
    # filled one row of each block at a time (long strided copies beat one transposing copy)
    x = np.zeros((r8, nb, 8), np.uint8)
    for k in range(8):
        rows = a[k::8]
        x[: len(rows), :, k] = rows
    return _transpose8_(x.view("<u8")).view(np.uint8).reshape(r8, 8 * nb)[:, :num_cols]


def transpose_bytes(a: np.ndarray) -> np.ndarray:
    """Bit-transpose a byte matrix: (R, B) uint8, little-endian bits (bit j of byte b is
    column 8 b + j) -> (8 B, ceil(R / 8)) uint8 in the same layout (rows past R read as 0)."""
    return np.ascontiguousarray(byte_codes(a, 8 * a.shape[1]).T)


def _pad_rows(a: np.ndarray, multiple: int) -> np.ndarray:
    pad = (-a.shape[0]) % multiple
    return np.concatenate([a, np.zeros((pad, a.shape[1]), a.dtype)]) if pad else a


def transpose_blocks(words: np.ndarray, num_cols: int, *, block: int = 1):
    """Transpose a packed bit matrix (R, ceil(num_cols / 64)) block by block.

    Yields packed blocks of the transpose, (<= 64 * block, ceil(R / 64)) each, in order; their
    concatenation is the (num_cols, ceil(R / 64)) transpose. Works on bytes: every 8 x 8 bit
    block is transposed inside one uint64, so no boolean matrix is ever materialised. Small
    blocks keep the byte shuffles in cache (1 word: about 0.9 s per 100,000 columns of 27,591
    rows on one core; 4 words 1.0 s, 32 words 3.1 s).
    """
    n_words = words.shape[1]
    for w0 in range(0, n_words, block):
        w1 = min(w0 + block, n_words)
        a = _pad_rows(np.ascontiguousarray(words[:, w0:w1]).view(np.uint8), 64)  # (R, Wb)
        n_here = min(64 * (w1 - w0), num_cols - 64 * w0)
        yield transpose_bytes(a).view("<u8")[:n_here]
