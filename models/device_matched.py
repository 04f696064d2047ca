"""Negatives matched to the positives' scene statistics on a torch device
(``negative_sampler="matched"`` of `curi.models.device_sampler.DeviceEpisodeSampler`).

Negative j of a set has the key (16 x object count + number of distinct colours) of positive
j mod 5, as in `curi.EpisodeSampler`: for each key a set needs, its scenes are drawn uniformly
from the pool's scenes of that key (hard: the alternates' scenes that do not satisfy the
concept; easy: the scenes that do not), first by rejection among the scenes of the key, then
exactly from bits; when the pool has too few of them, from the key's other scenes that do not
satisfy the concept. Every (episode, key) is one row of these draws: scenes of different keys
never collide, so the rows are independent. The rare set whose key holds too few scenes that
do not satisfy the concept at all (a concept that is the statistic) is drawn on the host by
`EpisodeSampler`'s own procedure, which then takes scenes of any key."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from curi.bits import pack_rows
from curi.models.device_bits import clear_bits, popcount
from curi.models.device_sampler import EXACT_MAX_ALTERNATES, take_uniform

__all__ = ["MatchedNegatives"]

_ROUNDS = 4  # rejection rounds of a key before its pool is drawn exactly (128 + ... + 1,024)


class MatchedNegatives:
    """``matched(kind, h, positives, used, gen) -> (B, m)`` negatives for the sampler
    `sampler` (its bank's bits, counts and options)."""

    def __init__(self, sampler) -> None:
        self.s = sampler
        dev = sampler.device
        key = sampler.reference.scene_keys  # (N,)
        self.key = torch.as_tensor(key, dtype=torch.int64).to(dev)
        self.order = torch.as_tensor(np.argsort(key, kind="stable"), dtype=torch.int64).to(dev)
        num_keys = int(key.max()) + 1
        start = np.searchsorted(key[np.argsort(key, kind="stable")], np.arange(num_keys + 1))
        self.start = torch.as_tensor(start, dtype=torch.int64).to(dev)  # (K + 1,)
        self.num_keys = num_keys
        bits = pack_rows(key[None, :] == np.arange(num_keys)[:, None]).view(np.int64)
        self.bits = torch.from_numpy(bits).to(dev)  # (K, W): the scenes of each key

    def __call__(
        self, kind: str, h: Tensor, positives: Tensor, used: Tensor, gen: torch.Generator
    ) -> Tensor:
        s, m = self.s, self.s.num_negatives
        want = self.key[positives][:, torch.arange(m, device=s.device) % positives.shape[1]]
        groups, need = torch.unique(
            torch.arange(len(h), device=s.device)[:, None] * self.num_keys + want,
            return_counts=True,
        )  # (G,): each (episode, key) of the batch in order, and its number of negatives
        e, k = groups // self.num_keys, groups % self.num_keys
        got = torch.full((len(groups), m), -1, dtype=torch.int64, device=s.device)
        n = torch.zeros_like(need)
        not_h = ~_rows(s.data.words, h[e]) & _rows(self.bits, k)  # (G, W)
        if kind == "hard":
            alt = s.alternates(h, positives)
            pool = self._hard(h, alt, e, k, used, need, got, n, gen)
            self._exact(pool & not_h, used[e], need, got, n, gen)  # the pool's scenes of k
        else:
            self._reject(s.in_not_h(h[e]), k, used[e], need, got, n, gen)
        self._exact(not_h, used[e], need, got, n, gen)
        out = got[torch.arange(m, device=s.device)[None, :] < need[:, None]].reshape(len(h), m)
        short = torch.zeros(len(h), dtype=torch.bool, device=s.device)
        short[e[n < need]] = True
        if bool(short.any()):
            self._on_host(kind, h, positives, used, short, out, gen)
        return out

    def _hard(self, h, alt, e, k, used, need, got, n, gen) -> Tensor:
        """Draw by rejection for the rows of episodes with many alternates; returns the pool
        bits (G, W) of every row that is still short (zeros for the others)."""
        s = self.s
        n_alt = popcount(alt).sum(1)[e]  # (G,)
        big = torch.nonzero(n_alt > EXACT_MAX_ALTERNATES).squeeze(1)
        if len(big):
            eb = e[big]
            sub_got, sub_n = got[big], n[big]
            accept = s.in_pool(h[eb], alt[eb])
            self._reject(accept, k[big], used[eb], need[big], sub_got, sub_n, gen)
            got[big], n[big] = sub_got, sub_n
        pool = torch.zeros(len(e), s.data.words.shape[1], dtype=torch.int64, device=s.device)
        rows = torch.nonzero((n < need) & (n_alt > 0)).squeeze(1)
        if len(rows):
            ep = torch.unique(e[rows])
            bits = s.pool_bits(h[ep], alt[ep])  # (E', W)
            pool[rows] = bits[torch.searchsorted(ep, e[rows])]
        return pool

    def _reject(self, accept, k, used, need, got, n, gen) -> None:
        """Rejection rounds among the scenes of each row's key, continuing `got` (R, m)."""
        count = (self.start[k + 1] - self.start[k])[:, None]  # (R, 1)

        dev = self.s.device

        def propose(rows: Tensor, size: int, g: torch.Generator) -> Tensor:
            u = torch.rand(len(rows), size, dtype=torch.float64, device=dev, generator=g)
            return self.order[self.start[k[rows]][:, None] + (u * count[rows]).long()]

        taken = torch.cat([used, got], 1)
        width = got.shape[1]
        more, extra = self.s.reject(
            accept, propose, taken, need - n, gen, width=width, rounds=_ROUNDS
        )
        _append(got, n, more, extra)

    def _exact(self, bits, used, need, got, n, gen) -> None:
        """Draw the rest of each short row exactly from `bits` (G, W), less used and taken."""
        rows = torch.nonzero(n < need).squeeze(1)
        if not len(rows):
            return
        free = clear_bits(clear_bits(bits[rows], used[rows]), got[rows])
        more = take_uniform(free, need[rows] - n[rows], got.shape[1], gen)
        sub_got, sub_n = got[rows], n[rows]
        _append(sub_got, sub_n, more, (more >= 0).sum(1))
        got[rows], n[rows] = sub_got, sub_n

    def _on_host(self, kind, h, positives, used, short, out, gen) -> None:
        """Sets whose key lacks scenes outside h: `EpisodeSampler`'s own procedure, drawing
        (`curi.pcg`) from a stream seeded by this step's generator."""
        from curi.pcg import states_of

        ref = self.s.reference
        words = ref.bank.truth_words
        seed = int(torch.randint(2**62, (1,), device=self.s.device, generator=gen))
        for b in torch.nonzero(short).squeeze(1).tolist():
            hb = int(h[b])
            taken = set(used[b].tolist())
            st = np.random.PCG64(np.random.SeedSequence([seed, b])).state["state"]
            state = states_of([(st["state"], st["inc"])])[0]
            ids, _ = ref._matched_negatives(
                kind, hb, np.asarray(words[hb]), positives[b].cpu().numpy(), taken, state
            )
            out[b] = torch.as_tensor(ids, dtype=torch.int64, device=self.s.device)


def _append(got: Tensor, n: Tensor, more: Tensor, count: Tensor) -> None:
    """Write `more` (R, m; `count` (R,) valid first) after the n (R,) entries of got (R, m)."""
    at = n[:, None] + torch.arange(more.shape[1], device=got.device)  # (R, m)
    ok = (at < got.shape[1]) & (torch.arange(more.shape[1], device=got.device) < count[:, None])
    rows = torch.arange(len(got), device=got.device)[:, None].expand_as(at)
    got[rows[ok], at[ok]] = more[ok]
    n += count


def _rows(table: Tensor, index: Tensor) -> Tensor:
    return table.index_select(0, index)
