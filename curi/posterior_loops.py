"""The posteriors of many support sets and their predictive on query sets, compiled by numba
(`curi.posterior.Posterior.posteriors`, `Posteriors.predictive`): one pass over the scenes'
scene-major rows, with no (E, S, ceil(H / 64)) or (K, E, Q) temporaries, and the same
floating-point sums in the same order."""

from __future__ import annotations

import numpy as np

from curi.kernel import kernel

__all__ = ["consistent_words", "predictive"]

_ONE = np.uint64(1)


@kernel
def consistent_words(by_scene, ids, labels, mask):  # pragma: no cover (compiled)
    """(E, W) packed concepts consistent with each support set (E, S): true on its
    positives, false on its negatives, and in `mask`."""
    out = np.empty((ids.shape[0], by_scene.shape[1]), np.uint64)
    for e in range(ids.shape[0]):
        words = out[e]
        for w in range(len(words)):
            words[w] = mask[w]
        for j in range(ids.shape[1]):  # row by row: each read in order
            row = by_scene[ids[e, j]]
            if labels[e, j]:
                for w in range(len(words)):
                    words[w] &= row[w]
            else:
                for w in range(len(words)):
                    words[w] &= ~row[w]
    return out


@kernel
def predictive(by_scene, idx, w, offsets, scene_ids):  # pragma: no cover (compiled)
    """(E, Q) the mass of each episode's posterior (concepts ``idx``, weights `w`, episode e
    at ``offsets[e]:offsets[e + 1]``) on the concepts true on each of its scenes, its
    concepts' weights added one after another from the first."""
    out = np.zeros(scene_ids.shape)
    for e in range(scene_ids.shape[0]):
        for q in range(scene_ids.shape[1]):
            row = by_scene[scene_ids[e, q]]
            s = 0.0
            for k in range(offsets[e], offsets[e + 1]):
                c = idx[k]
                if (row[c >> 6] >> np.uint64(c & 63)) & _ONE:
                    s += w[k]
            out[e, q] = s
    return out
