"""The proposer of the propose-and-verify learner: a support encoder that reads all 25 labelled
support scenes (objects within a scene, then scenes with their labels across the set) and a
GRU decoder with attention over them that emits concept programs token by token under the
grammar's type-stack mask (`models.program_grammar`), so every completed sample parses."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from curi.models.program_grammar import BOS, PAD, TOKENS, allowed, start, step
from curi.scenes import COLORS, MATERIALS, MAX_OBJECTS, NUM_BINS, SHAPES, SIZES

__all__ = ["FEATURES", "ProgramProposer", "scene_features"]

_SIZES = (len(SHAPES), len(COLORS), len(MATERIALS), len(SIZES), NUM_BINS, NUM_BINS)
_OFFSETS = np.cumsum((0,) + _SIZES[:-1])
FEATURES = int(sum(_SIZES))  # one-hot width of an object: 3 + 8 + 2 + 2 + 8 + 8 = 31
_ID = {t: i for i, t in enumerate(TOKENS)}


def scene_features(n_objects: np.ndarray, props: np.ndarray) -> tuple[Tensor, Tensor]:
    """One-hot object features of scenes given as columnar arrays.

    Args:
        n_objects: (N,) objects per scene.
        props: (N, 5, 6) property indices (`curi.scenes.PROPERTIES` order; locations 1..8).

    Returns:
        (N, 5, FEATURES) float32 features and an (N, 5) bool mask of real objects.
    """
    props = np.asarray(props, np.int64)
    n = len(props)
    mask = np.arange(MAX_OBJECTS)[None, :] < np.asarray(n_objects)[:, None]  # (N, 5)
    codes = props.copy()
    codes[..., 4:] -= 1  # location bins 1..8 -> 0..7
    codes = np.where(mask[..., None], codes + _OFFSETS, -1)  # (N, 5, 6)
    out = np.zeros((n, MAX_OBJECTS, FEATURES), np.float32)
    nn_, kk, jj = np.nonzero(codes >= 0)
    out[nn_, kk, codes[nn_, kk, jj]] = 1.0
    return torch.from_numpy(out), torch.from_numpy(mask)


_CLOSED = torch.full((len(TOKENS),), float("-inf"))


@lru_cache(maxsize=100_000)
def _mask_row(state, holes: bool) -> Tensor:
    """The additive mask of one state (all -inf once finished or dropped)."""
    if state is None or state.done:
        return _CLOSED
    row = _CLOSED.clone()
    row[list(allowed(state, holes))] = 0.0
    return row


class SupportEncoder(nn.Module):
    """Scenes to a memory of the support set: an MLP per object, mean and max over a scene's
    objects, a label embedding, then a transformer over the 25 labelled scenes."""

    def __init__(self, dim: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.obj = nn.Sequential(nn.Linear(FEATURES, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.scene = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU())
        self.label = nn.Embedding(2, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, batch_first=True)
        self.across = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, feats: Tensor, mask: Tensor, labels: Tensor) -> Tensor:
        """(B, S, 5, F) features, (B, S, 5) mask, (B, S) labels -> (B, S, D) memory."""
        h = self.obj(feats)  # (B, S, 5, D)
        m = mask.unsqueeze(-1).to(h.dtype)
        mean = (h * m).sum(2) / m.sum(2).clamp(min=1)
        mx = h.masked_fill(~mask.unsqueeze(-1), -1e4).amax(2)
        s = self.scene(torch.cat([mean, mx], -1)) + self.label(labels.long())  # (B, S, D)
        return self.across(s)


class ProgramProposer(nn.Module):
    """Support encoder plus a GRU decoder over `TOKENS` with dot-product attention on the
    support memory; `holes` says whether constants are emitted as typed holes."""

    def __init__(self, *, dim: int = 64, layers: int = 2, holes: bool = True) -> None:
        super().__init__()
        self.dim, self.layers, self.holes = dim, layers, holes
        self.encoder = SupportEncoder(dim, layers)
        self.embed = nn.Embedding(len(TOKENS), dim)
        self.init = nn.Linear(2 * dim, dim)
        self.cell = nn.GRUCell(2 * dim, dim)
        self.out = nn.Linear(2 * dim, len(TOKENS))

    def config(self) -> dict:
        """What rebuilds this module: ``ProgramProposer(**config)``."""
        return {"dim": self.dim, "layers": self.layers, "holes": self.holes}

    def encode(self, feats: Tensor, mask: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """Memory (B, S, D) and initial state (B, D) of B support sets."""
        mem = self.encoder(feats, mask, labels)
        lab = labels.unsqueeze(-1).to(mem.dtype)  # (B, S, 1)
        pos = (mem * lab).sum(1) / lab.sum(1).clamp(min=1)
        neg = (mem * (1 - lab)).sum(1) / (1 - lab).sum(1).clamp(min=1)
        return mem, torch.tanh(self.init(torch.cat([pos, neg], -1)))

    def _step(self, tok: Tensor, h: Tensor, mem: Tensor) -> tuple[Tensor, Tensor]:
        """One decoder step: token ids (N,), state (N, D), memory (N, S, D) -> logits, state."""
        att = torch.softmax((mem @ h.unsqueeze(-1)).squeeze(-1) / math.sqrt(self.dim), -1)
        ctx = (att.unsqueeze(-1) * mem).sum(1)  # (N, D)
        h = self.cell(torch.cat([self.embed(tok), ctx], -1), h)
        return self.out(torch.cat([h, ctx], -1)), h

    def loss(self, feats: Tensor, mask: Tensor, labels: Tensor, targets: Tensor) -> Tensor:
        """Teacher-forced cross-entropy of (B, L) target ids (`PAD` after the end), masked by
        the grammar so the model only learns among the tokens that may come next."""
        mem, h = self.encode(feats, mask, labels)
        prev = torch.full((len(targets),), _ID[BOS], dtype=torch.long)
        total, count = feats.new_zeros(()), 0
        states = [start()] * len(targets)
        for t in range(targets.shape[1]):
            logits, h = self._step(prev, h, mem)
            gold = targets[:, t]
            live = gold != _ID[PAD]
            if not live.any():
                break
            logits = logits + self._mask(states, logits)
            total = total + F.cross_entropy(logits[live], gold[live], reduction="sum")
            count += int(live.sum())
            states = [
                step(s, TOKENS[g]) if ok else s
                for s, g, ok in zip(states, gold.tolist(), live.tolist(), strict=True)
            ]
            prev = gold.clamp(min=0)
        return total / max(count, 1)

    def _mask(self, states, like: Tensor) -> Tensor:
        """(N, V) additive mask: 0 where the grammar allows the token, -inf elsewhere."""
        rows = [_mask_row(s, self.holes) for s in states]
        return torch.stack(rows).to(like.dtype)

    @torch.no_grad()
    def sample(
        self,
        feats: Tensor,
        mask: Tensor,
        labels: Tensor,
        *,
        n: int,
        temperature: float = 1.0,
        max_steps: int = 32,
        generator: torch.Generator | None = None,
    ) -> list[tuple[list[str], float]]:
        """`n` token sequences for one support set (feats (S, 5, F), mask, labels (S,)): each
        completed one with its log-probability; greedy when `temperature` is 0. Sequences that
        reach `max_steps` unfinished are dropped."""
        mem, h = self.encode(feats[None], mask[None], labels[None])
        mem, h = mem.expand(n, -1, -1), h.expand(n, -1).contiguous()
        prev = torch.full((n,), _ID[BOS], dtype=torch.long)
        states, seqs, logp = [start()] * n, [[] for _ in range(n)], torch.zeros(n)
        for _ in range(max_steps):
            live = [i for i, s in enumerate(states) if s is not None and not s.done]
            if not live:
                break
            logits, h = self._step(prev, h, mem)
            logits = logits + self._mask(states, logits)
            lp = torch.log_softmax(logits if temperature == 0 else logits / temperature, -1)
            if temperature == 0:
                tok = lp.argmax(-1)
            else:
                tok = torch.multinomial(lp.exp().nan_to_num(0.0) + 1e-30, 1, generator=generator)
                tok = tok.squeeze(-1)
            for i in live:
                t = int(tok[i])
                if not math.isfinite(float(lp[i, t])):
                    states[i] = None  # no token may follow: a dead end, dropped
                    continue
                logp[i] += lp[i, t]
                seqs[i].append(TOKENS[t])
                states[i] = step(states[i], TOKENS[t])
            prev = tok
        return [(seqs[i], float(logp[i])) for i, s in enumerate(states) if s is not None and s.done]

    @torch.no_grad()
    def beam(
        self, feats: Tensor, mask: Tensor, labels: Tensor, *, width: int, max_steps: int = 32
    ) -> list[tuple[list[str], float]]:
        """About the `width` most probable complete sequences for one support set, by beam
        search under the grammar's mask: each with its log-probability, best first."""
        mem, h = self.encode(feats[None], mask[None], labels[None])
        seqs: list[list[str]] = [[]]
        states = [start()]
        logp = torch.zeros(1)
        prev = torch.full((1,), _ID[BOS], dtype=torch.long)
        done: list[tuple[list[str], float]] = []
        for _ in range(max_steps):
            logits, h2 = self._step(prev, h, mem.expand(len(seqs), -1, -1))
            lp = torch.log_softmax(logits + self._mask(states, logits), -1) + logp[:, None]
            flat = lp.reshape(-1)
            room = width - len(done)
            n_top = min(room + width, int(torch.isfinite(flat).sum()))
            if n_top <= 0:
                break
            top = torch.topk(flat, n_top)
            keep_rows, keep_tok, keep_lp = [], [], []
            for v, j in zip(top.values.tolist(), top.indices.tolist(), strict=True):
                if done and len(done) >= width and v <= done[-1][1]:
                    break
                r, t = divmod(j, lp.shape[1])
                s = step(states[r], TOKENS[t])
                if s is None:
                    continue
                if s.done:
                    done.append((seqs[r] + [TOKENS[t]], v))
                    done.sort(key=lambda d: -d[1])
                    del done[width:]
                elif len(keep_rows) < width:
                    keep_rows.append(r)
                    keep_tok.append(t)
                    keep_lp.append((s, v))
            if not keep_rows or (len(done) >= width and keep_lp[0][1] <= done[-1][1]):
                break
            idx = torch.tensor(keep_rows)
            seqs = [seqs[r] + [TOKENS[t]] for r, t in zip(keep_rows, keep_tok, strict=True)]
            states = [s for s, _ in keep_lp]
            logp = torch.tensor([v for _, v in keep_lp])
            h, prev = h2[idx], torch.tensor(keep_tok)
        return done
