"""An `EpisodeSampler`'s draws, compiled by numba: one episode's (`head`, `negative_set`,
`order_pair`: what ``sampler[i]`` calls) and many episodes' at once (`curi.episodes.batch`),
all made with `curi.pcg` on the episodes' stream states, so one-by-one and batched episodes
draw the same numbers whatever numpy does (tests/test_episodes.py checks both against a plain
numpy sampler, tests/test_expected.py against stored episodes)."""

from __future__ import annotations

import numpy as np

from curi import pcg
from curi.bit_loops import lowest, popcount
from curi.kernel import kernel

__all__ = [
    "candidates",
    "distinct",
    "exact_set",
    "head",
    "heads",
    "negative_set",
    "not_h_set",
    "order_pair",
    "orders",
    "rounds",
    "select",
]

_ONE = np.uint64(1)


@kernel
def _upper_bound(a, x):
    """The first index of the sorted `a` whose value exceeds x (``np.searchsorted`` right)."""
    lo, hi = 0, len(a)
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel
def _nth_bit(x, n):
    """The position of the n-th (from 0) lowest set bit of the uint64 x."""
    for _ in range(n):
        x &= x - _ONE
    return lowest(x)


@kernel
def _insert(values, n, v):
    """Insert v into the ascending, distinct ``values[:n]`` unless it is there; the new n."""
    i = n
    while i > 0 and values[i - 1] > v:
        i -= 1
    if i > 0 and values[i - 1] == v:
        return n
    for j in range(n, i, -1):
        values[j] = values[j - 1]
    values[i] = v
    return n + 1


@kernel
def _among(c, values, n):
    """Whether c is one of ``values[:n]`` (a few dozen: a scan beats a hash set)."""
    for i in range(n):
        if values[i] == c:
            return True
    return False


@kernel
def distinct(s, n, k):
    """`curi.episodes._distinct`: k distinct integers of [0, n) in random order (k <= n):
    the distinct values of 2k draws, ascending, more draws of k merged in until k are found,
    then shuffled (a few dozen values: kept sorted by insertion). k = 0 draws nothing."""
    if k == 0:
        return np.empty(0, np.int64)
    if 4 * k > n:
        return pcg.permutation(s, n)[:k].copy()
    found = np.empty(2 * k, np.int64)  # fewer than k, then k more draws: under 2k
    draw = np.empty(2 * k, np.int64)
    pcg.integers(s, n, draw)
    m = 0
    for v in draw:
        m = _insert(found, m, v)
    while m < k:
        pcg.integers(s, n, draw[:k])
        for v in draw[:k]:
            m = _insert(found, m, v)
    out = found[:m].copy()
    pcg._shuffle(s, out, 1, False)  # `rng.shuffle`
    return out[:k].copy()


@kernel
def head(s, cum, concepts, counts, k):  # pragma: no cover (compiled)
    """(concept, (k,) ranks of its positives) of one episode from its episode stream's state
    `s` (advanced): a uniform draw against the prior's cumulative weights `cum`, then `k`
    distinct ranks among the concept's ``counts[h]`` scenes (`EpisodeSampler._positive_ranks`)."""
    u = np.empty(1)
    pcg.random(s, u)
    h = concepts[min(_upper_bound(cum, u[0]), len(cum) - 1)]
    return h, distinct(s, counts[h], k)


@kernel
def heads(states, cum, concepts, counts, k):  # pragma: no cover (compiled)
    """((E,) concepts, (E, k) ranks of their positives): `head` of E episodes from their
    episode streams' `states` (advanced in place)."""
    h = np.empty(len(states), np.int64)
    ranks = np.empty((len(states), k), np.int64)
    for e in range(len(states)):
        h[e], drawn = head(states[e], cum, concepts, counts, k)
        for j in range(k):  # (element by element: an array assignment compiles slowly)
            ranks[e, j] = drawn[j]
    return h, ranks


@kernel
def select(words, h, ranks):  # pragma: no cover (compiled)
    """(E, R) the scenes of rank ``ranks[e]`` (0-based) among the scenes of concept ``h[e]``
    (its packed row of `words`), as `curi.bits.select_bits` finds them: one scan of the row's
    popcounts, up to its last rank."""
    out = np.empty(ranks.shape, np.int64)
    order = np.empty(ranks.shape[1], np.int64)
    for e in range(len(h)):
        row = words[h[e]]
        for j in range(len(order)):  # the ranks' positions, by rank (insertion sort)
            i = j
            while i > 0 and ranks[e, order[i - 1]] > ranks[e, j]:
                order[i] = order[i - 1]
                i -= 1
            order[i] = j
        i, before = 0, 0
        for w in range(len(row)):
            n = popcount(row[w])
            while i < len(order) and ranks[e, order[i]] < before + n:
                out[e, order[i]] = 64 * w + _nth_bit(row[w], ranks[e, order[i]] - before)
                i += 1
            if i == len(order):
                break
            before += n
    return out


@kernel
def order_pair(s, n):  # pragma: no cover (compiled)
    """The two permutations of n that shuffle one episode's support and query sets, from its
    order stream's state `s` (`EpisodeSampler._orders`)."""
    return pcg.permutation(s, n), pcg.permutation(s, n)


@kernel
def orders(states, n):  # pragma: no cover (compiled)
    """((E, n), (E, n)): `order_pair` of E episodes."""
    s_perm = np.empty((len(states), n), np.int64)
    q_perm = np.empty((len(states), n), np.int64)
    for e in range(len(states)):
        s_order, q_order = order_pair(states[e], n)
        for j in range(n):
            s_perm[e, j], q_perm[e, j] = s_order[j], q_order[j]
    return s_perm, q_perm


@kernel
def candidates(states, n, size, skip):  # pragma: no cover (compiled)
    """(E, size) ``rng.integers(0, n, size)`` of each stream after ``rng.integers(0, n,
    skip[e])`` (the candidates an earlier set used); `states` advanced in place."""
    out = np.empty((len(states), size), np.int64)
    for e in range(len(states)):
        if skip[e]:
            pcg.integers(states[e], n, np.empty(skip[e], np.int64))
        pcg.integers(states[e], n, out[e])
    return out


@kernel
def _not_h(row, c):
    return (row[c >> 6] >> np.uint64(c & 63)) & _ONE == 0


@kernel
def exact_set(words, alt, h, used, k, n, s):  # pragma: no cover (compiled)
    """One set's negatives from a pool of a few alternates (`EpisodeSampler._negatives`,
    hard, at most `_EXACT_MAX_ALTERNATES`): uniform distinct scenes of the OR of the
    alternates' rows (`alt`: their packed bits) less h's row and the `used` scenes
    (`_pool_exact`), then, if the pool is short, random scenes not satisfying h
    (`_random_not_h`; `n` scenes). `words` is the bank's (H, W) truth; the stream state
    `s` advances."""
    n_words = words.shape[1]
    pool = np.zeros(n_words, np.uint64)
    for a_word in range(len(alt)):
        x = alt[a_word]
        while x:
            low = x & (~x + _ONE)
            a = 64 * a_word + lowest(low)
            for w in range(n_words):
                pool[w] |= words[a, w]
            x ^= low
    row = words[h]
    for w in range(n_words):
        pool[w] &= ~row[w]
    for u in used:
        pool[u >> 6] &= ~(_ONE << np.uint64(u & 63))
    cum = np.empty(n_words, np.int64)
    total = 0
    for w in range(n_words):
        total += popcount(pool[w])
        cum[w] = total
    take = min(total, k)
    out = np.empty(k, np.int64)
    if take:
        for i, r in enumerate(distinct(s, total, take)):
            w = _upper_bound(cum, r)
            within = r - (cum[w] - popcount(pool[w]))
            out[i] = 64 * w + _nth_bit(pool[w], within)
    if take < k:  # the pool is too small: random scenes not satisfying h
        _fill_not_h(row, used, out, take, n, s)
    return out


@kernel
def _fill_not_h(row, used, out, got, n, s):  # pragma: no cover (compiled)
    """Fill ``out[got:]`` with distinct random scenes of `n` that do not satisfy h (its
    packed `row`), are not `used` and not in ``out[:got]``, drawn in rounds of twice the
    number missing plus 8 (`EpisodeSampler._random_not_h`); the state `s` advances."""
    k = len(out)
    seen = np.empty(len(used) + k, np.int64)  # the used scenes, then those kept
    for i in range(len(used)):
        seen[i] = used[i]
    for i in range(got):
        seen[len(used) + i] = out[i]
    n_seen = len(used) + got
    draw = np.empty(2 * (k - got) + 8, np.int64)
    while got < k:
        pcg.integers(s, n, draw)
        for c in draw:
            if _not_h(row, c) and not _among(c, seen, n_seen):
                seen[n_seen] = c
                n_seen += 1
                out[got] = c
                got += 1
                if got == k:
                    break


@kernel
def not_h_set(row, used, k, n, s):  # pragma: no cover (compiled)
    """k distinct random scenes of `n` that do not satisfy h (its packed `row`) and are not
    `used` (`EpisodeSampler._random_not_h`); the state `s` advances."""
    out = np.empty(k, np.int64)
    _fill_not_h(row, used, out, 0, n, s)
    return out


@kernel
def _by_rejection(by_scene, alt, h, used, k, n, batch, max_rounds, s):  # pragma: no cover
    """(k negatives, found): random scenes kept when they satisfy an alternate (`alt`, packed)
    and not h, are not `used` and not kept already, in up to `max_rounds` rounds of `batch`
    (`EpisodeSampler._pool_by_rejection`); the state `s` advances."""
    out = np.empty(k, np.int64)
    seen = np.empty(len(used) + k, np.int64)
    for i in range(len(used)):
        seen[i] = used[i]
    n_seen, got = len(used), 0
    h_word, h_bit = h >> 6, _ONE << np.uint64(h & 63)
    cand = np.empty(batch, np.int64)
    for _ in range(max_rounds):
        pcg.integers(s, n, cand)
        for c in cand:
            row = by_scene[c]
            if row[h_word] & h_bit:
                continue
            hit = False
            for w in range(len(alt)):
                if row[w] & alt[w]:
                    hit = True
                    break
            if hit and not _among(c, seen, n_seen):
                seen[n_seen] = c
                n_seen += 1
                out[got] = c
                got += 1
                if got == k:
                    return out, True
    return out, False


@kernel
def negative_set(words, by_scene, alt, h, used, k, most_exact, batch, max_rounds, s):
    """One set's k negatives (`EpisodeSampler._negatives`, paper sampler) from its stream's
    state `s` (advanced): with no alternate (`alt`, packed; easy negatives pass none), random
    scenes not satisfying h; with more than `most_exact`, the pool by rejection, falling back
    to the exact pool; else the exact pool (`exact_set`). `used`: the scenes left out."""
    n = by_scene.shape[0]
    n_alt = 0
    for w in range(len(alt)):
        n_alt += popcount(alt[w])
    if n_alt == 0:
        return not_h_set(words[h], used, k, n, s)
    if n_alt > most_exact:
        out, found = _by_rejection(by_scene, alt, h, used, k, n, batch, max_rounds, s)
        if found:
            return out
    return exact_set(words, alt, h, used, k, n, s)


@kernel
def rounds(cand, at, used, k, size, max_rounds, alt, h, by_scene, words):  # pragma: no cover
    """((A, k) negatives, (A,) where each set's rounds end, (A,) found) of one set of A
    episodes, found round after round of `size` candidates from ``cand[a, at[a]:]`` as the
    sampler's loops find them (`EpisodeSampler._random_not_h`; with alternates,
    `_pool_by_rejection`, at most `max_rounds`): a candidate is kept when it passes the test
    (not satisfying h; with alternates ``alt[a]`` (packed), satisfying one of them too, read
    off the scene-major `by_scene`), is not `used` and not kept already; the set ends with the
    round of its k-th. A set whose rounds outrun the candidates is not found."""
    got = np.full((len(cand), k), -1, np.int64)
    end, ok = at.copy(), np.zeros(len(cand), np.bool_)
    seen = np.empty(used.shape[1] + k, np.int64)  # the used scenes, then those kept
    for a in range(len(cand)):
        for i in range(used.shape[1]):  # (element by element: a slice assignment compiles slowly)
            seen[i] = used[a, i]
        n_seen = used.shape[1]
        count, r, hh = 0, 0, h[a]
        h_word, h_bit = hh >> 6, _ONE << np.uint64(hh & 63)
        while max_rounds < 0 or r < max_rounds:
            first = at[a] + r * size
            if first + size > cand.shape[1]:
                break
            for c in cand[a, first : first + size]:
                if alt.shape[1] == 0:
                    passes = words[hh, c >> 6] & (_ONE << np.uint64(c & 63)) == 0
                else:
                    row = by_scene[c]
                    passes = row[h_word] & h_bit == 0
                    if passes:
                        hit = False
                        for w in range(alt.shape[1]):
                            if row[w] & alt[a, w]:
                                hit = True
                                break
                        passes = hit
                if passes and not _among(c, seen, n_seen):
                    seen[n_seen] = c
                    n_seen += 1
                    got[a, count] = c
                    count += 1
                    if count == k:
                        break
            if count == k:
                end[a], ok[a] = first + size, True
                break
            r += 1
    return got, end, ok
