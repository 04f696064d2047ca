"""The AP on the evaluation set of many posteriors at once (the gap report scores thousands of
episodes a row): the numbers of `curi.oracles.metrics.oracle_average_precision` scoring them one
by one, to the bits, with each step done for all episodes together. Scores are compared to 12
decimals as integers ``rint(score * 1e12)``, which is how `np.round` rounds them."""

from __future__ import annotations

import numpy as np

from curi.oracles.eval_set import EvalSet
from curi.oracles.metrics import _CELL_MAX_GROUPS, _MAX_CELLS, _NIBBLE_BITS
from curi.posterior import Posteriors

__all__ = ["oracle_aps", "random_aps"]

_EPISODE_SHIFT = 42  # episode << 42 | rint(score * 1e12): scores lie in [0, ~1], under 2**41
_KEY_MASK = (1 << _EPISODE_SHIFT) - 1


def oracle_aps(
    ev: EvalSet, concepts: np.ndarray, post: Posteriors, groups: np.ndarray
) -> np.ndarray:
    """(E,) `metrics.oracle_average_precision` of each episode's posterior against the
    ground truth of its concept.

    Args:
        ev: the evaluation set.
        concepts: (E,) each episode's concept.
        post: the E posteriors.
        groups: (H,) the synonym group of every concept of the bank.
    """
    g = _Groups(post, groups)
    concepts = np.asarray(concepts)
    labels = ev.rows[concepts]  # (E, ceil(M / 64))
    m = len(ev)
    out = np.bitwise_count(labels).sum(1) / m  # no consistent hypothesis: the positive rate
    few = np.flatnonzero((g.count > 0) & (g.count <= _CELL_MAX_GROUPS))
    ap, fits = _by_cells(ev, g, few, labels[few])
    out[few[fits]] = ap
    rest = np.setdiff1d(np.flatnonzero(g.count > 0), few[fits])
    out[rest] = _by_scores(ev, g, rest, concepts[rest], labels[rest])
    return out


def random_aps(picks: np.ndarray, lengths: np.ndarray, m: int) -> np.ndarray:
    """(E,) `metrics.random_average_precision` of each episode from what it drew: its
    positives' ranks less 1 (``rng.choice(m, n_pos, replace=False)``), `lengths` of them
    per episode one after another in `picks` (of `m` ranks), each episode's ordered and its
    terms made by `curi.oracles.loops.rank_terms`, each mean summed as `np.mean` sums it (NaN
    without positives)."""
    from curi.oracles.loops import rank_terms

    lengths = np.asarray(lengths, np.int64)
    terms = rank_terms(np.asarray(picks, np.int64), np.cumsum(lengths), m)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    with np.errstate(invalid="ignore"):
        return _segment_sums(terms, owner, len(lengths)) / lengths


class _Groups:
    """The synonym groups of E posteriors, as `metrics._group_rows` finds them one episode at
    a time: per episode, its groups in ascending order (``start[e]`` to ``start[e] +
    count[e]``), each with its first concept (``rep``) and its mass (``w``, the concepts'
    weights added in their order)."""

    def __init__(self, post: Posteriors, groups: np.ndarray):
        lengths = np.diff(post.offsets)
        episode = np.repeat(np.arange(len(lengths)), lengths)
        key = episode * (int(groups.max()) + 1) + groups[post.idx]
        uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
        self.w = np.bincount(inv, weights=post.w)  # (G,)
        self.rep = post.idx[first]
        self.episode = episode[first]
        self.count = np.bincount(self.episode, minlength=len(lengths))
        self.start = np.r_[0, np.cumsum(self.count)[:-1]]


# --- up to 8 groups: the scenes counted per signature ---------------------------------------
def _by_cells(ev: EvalSet, g: _Groups, eps: np.ndarray, labels: np.ndarray):
    """(APs, which of `eps` they are for): the partition of the evaluation set by each
    episode's groups (`curi.oracles.loops.cells`: each cell's score the weights of its
    groups added in order from 0), then `metrics.ap_from_counts`; an episode with more than
    `_MAX_CELLS` cells is left out (scored from its scenes' scores)."""
    from curi.oracles.loops import cells

    if len(eps) == 0:
        return np.zeros(0), np.zeros(0, bool)
    members, _, _ = _members(g, eps)
    count = g.count[eps]
    start = np.cumsum(count) - count
    args = (ev.rows, ev.all_scenes, labels, g.rep[members], g.w[members], start, count)
    fits, owner, score, n_pos, n_tot = cells(*args, _MAX_CELLS)
    return _ap_from_counts(owner, score, n_pos, n_tot, len(eps))[fits], fits


def _ap_from_counts(owner, score, n_pos, n_tot, n: int) -> np.ndarray:
    """(n,) `metrics.ap_from_counts` of each owner's cells (scores and counts)."""
    rounded = np.round(-score, 12)
    order = np.lexsort((rounded, owner))  # by owner, then descending score
    owner, rounded = owner[order], rounded[order]
    at = _runs(owner, rounded)  # one value per (owner, distinct score)
    pos = np.add.reduceat(n_pos[order], at).astype(np.float64)
    tot = np.add.reduceat(n_tot[order], at).astype(np.float64)
    v_owner = owner[at]
    total_pos = np.bincount(v_owner, weights=pos, minlength=n)
    tp = _segment_cumsum(pos, v_owner)
    seen = _segment_cumsum(tot, v_owner)
    terms = pos / total_pos[v_owner] * tp / np.maximum(seen, 1)
    out = _segment_sums(terms, v_owner, n)
    out[total_pos == 0] = np.nan
    return out


# --- more groups: scene scores, counted from the scenes that can reach a positive's ---------
def _by_scores(ev: EvalSet, g: _Groups, eps, concepts, labels) -> np.ndarray:
    """(len(eps),) APs from scene scores (`metrics._ap_of_scores`): the scores of the
    positives and of the other scenes that can reach the lowest positive score (a scene that
    holds only groups lighter in total than that, less a margin far above rounding, cannot),
    each as `metrics._scene_scores` scores it (`curi.oracles.loops`); thresholds and counts
    as in `metrics._ap_of_scores`."""
    m, n = len(ev), len(eps)
    scored = _Scored(ev, g, eps)
    pe, key, scores = scored.bits(labels, np.arange(n))  # every positive, episode by episode
    lowest = np.full(n, np.inf)  # each episode's lowest positive score that rounds above 0
    above_0 = np.flatnonzero(key > 0)  # in runs of episodes: a min per run
    if len(above_0):
        run = _runs(pe[above_0])
        lowest[pe[above_0[run]]] = np.minimum.reduceat(scores[above_0], run)
    ranked = np.sort((pe << _EPISODE_SHIFT) | key)  # by episode, then key
    at = _runs(ranked)  # one threshold per (episode, distinct positive score)
    t_ep, t_key = ranked[at] >> _EPISODE_SHIFT, ranked[at] & _KEY_MASK
    pos_at = np.diff(np.r_[at, len(pe)])
    tp_ge = _segment_cumsum(pos_at[::-1], t_ep[::-1])[::-1]  # positives at or above
    ce, c_key, _ = scored.bits(*_candidates(ev, g, eps, _heavy(g, eps, lowest), labels))
    ordered = np.sort((ce << _EPISODE_SHIFT) | c_key)
    ends = np.cumsum(np.bincount(ce, minlength=n))
    above = ends[t_ep] - np.searchsorted(ordered, (t_ep << _EPISODE_SHIFT) | t_key, side="left")
    n_ge = np.where(t_key == 0, m, tp_ge + above)  # a threshold of 0: every scene
    with np.errstate(invalid="ignore", divide="ignore"):  # no positive: NaN, as one by one
        return _segment_sums(pos_at * tp_ge / n_ge, t_ep, n) / np.bincount(pe, minlength=n)


class _Scored:
    """The scenes of packed rows scored under the posteriors of the episodes `eps`, each
    score as `metrics._scene_scores` makes it."""

    def __init__(self, ev: EvalSet, g: _Groups, eps: np.ndarray):
        self.rows = ev.rows
        self.tables, self.first = _tables(g, eps)
        self.block_rows = _block_rows(g, eps, len(self.tables), self.first)
        self.count = g.count[eps]

    def bits(self, sets: np.ndarray, owner: np.ndarray):
        """((P,) episode, (P,) `np.round(score, 12)` as an integer, (P,) score) of every set
        bit of the packed rows `sets` (row r under the posterior of episode ``owner[r]``),
        row by row, ascending."""
        from curi.oracles.loops import bit_scores

        args = (self.rows, self.block_rows, self.tables, self.first, self.count)
        row, _, scores = bit_scores(*args, sets, owner)
        return owner[row], np.rint(scores * 1e12).astype(np.int64), scores


def _tables(g: _Groups, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, 256) the 256-entry table of `metrics._scene_scores` for every block of 8 groups
    of each episode of `eps`, and (len(eps),) the index of each episode's first table."""
    blocks = -(-g.count[eps] // 8)
    first = np.cumsum(blocks) - blocks
    w = np.zeros((int(blocks.sum()), 8))
    members, local, slot = _members(g, eps)
    w.reshape(-1)[first[local] * 8 + slot] = g.w[members]
    nibbles = (w.reshape(-1, 2, 1, 4) * _NIBBLE_BITS).sum(-1)  # (T, 2, 16)
    return (nibbles[:, 1, :, None] + nibbles[:, 0, None, :]).reshape(-1, 256), first


def _block_rows(g: _Groups, eps: np.ndarray, n_tables: int, first: np.ndarray) -> np.ndarray:
    """(8 T,) the evaluation-set row (a group's first concept) of group k of block t at
    ``8 t + k``, for every block of 8 groups of the episodes `eps` (slots past an episode's
    last group: 0, never read)."""
    members, local, slot = _members(g, eps)
    rows = np.zeros(8 * n_tables, np.int64)
    rows[first[local] * 8 + slot] = g.rep[members]
    return rows


def _members(g: _Groups, eps: np.ndarray):
    """(groups, their episode's position in `eps`, their place among its groups) of every
    group of the episodes `eps`, episode by episode."""
    count = g.count[eps]
    local = np.repeat(np.arange(len(eps)), count)
    slot = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return g.start[eps][local] + slot, local, slot


def _heavy(g: _Groups, eps: np.ndarray, lowest: np.ndarray) -> np.ndarray:
    """Indices (into `g`) of the groups of each episode of `eps` that are not light: lighter
    groups, together, weigh less than the episode's lowest positive score less 1e-9 (far
    above the rounding of any sum), so a scene holding only them scores below every
    positive. None of an episode whose positives all score 0."""
    members, local, _ = _members(g, eps)
    order = np.lexsort((g.w[members], local))  # per episode, lightest first
    members, local = members[order], local[order]
    cum = _segment_cumsum(g.w[members], local)
    return members[~(cum < lowest[local] - 1e-9)]


def _candidates(ev: EvalSet, g: _Groups, eps: np.ndarray, heavy: np.ndarray, labels):
    """((R, W) packed rows, (R,) their episodes' positions in `eps`): the scenes of each
    episode that hold a heavy group of it and are not its positives."""
    local = _owner_of(g, eps, heavy)  # in runs: `_heavy` lists them episode by episode
    if len(heavy) == 0:
        return np.zeros((0, ev.rows.shape[1]), np.uint64), np.zeros(0, np.int64)
    at = _runs(local)
    union = np.bitwise_or.reduceat(ev.rows[g.rep[heavy]], at)  # (episodes with heavy, W)
    return union & ~labels[local[at]], local[at]


def _owner_of(g: _Groups, eps: np.ndarray, members: np.ndarray) -> np.ndarray:
    """The position in `eps` of the episode of each group of `members`."""
    where = np.full(len(g.count), -1)
    where[eps] = np.arange(len(eps))
    return where[g.episode[members]]


# --- sums per episode, in the order a sum of one episode's array makes them -------------------
def _runs(*keys: np.ndarray) -> np.ndarray:
    """Where each run of equal consecutive (key, ...) starts."""
    new = np.zeros(len(keys[0]), bool)
    new[:1] = True
    for key in keys:
        new[1:] |= key[1:] != key[:-1]
    return np.flatnonzero(new)


def _segment_cumsum(values: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Running sums of `values` restarting at each new `owner` (owners in runs); exact for
    the integer counts it is given (ints, or floats holding ints)."""
    total = np.cumsum(values)
    start = _runs(owner)
    base = np.r_[0, total[start[1:] - 1]][: len(start)]
    return total - np.repeat(base, np.diff(np.r_[start, len(values)]))


def _segment_sums(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """(n,) the sum of each owner's run of `values`, as `np.sum` adds one owner's array:
    runs of equal length are summed as the rows of one matrix (the same order of additions;
    a segmented `np.add.reduceat` adds in another)."""
    out = np.zeros(n)
    start = _runs(owner)
    length = np.diff(np.r_[start, len(values)])
    for k in np.unique(length).tolist():
        runs = start[length == k]
        out[owner[runs]] = values[runs[:, None] + np.arange(k)].sum(1)
    return out
