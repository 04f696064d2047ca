"""The auxiliary concept decoder (paper section 4.1): an LSTM that reads the episode's prototypes
[c-, c+] and is trained by teacher forcing to emit the concept's canonical postfix tokens, and
the tokenizer that turns concept strings into padded id tensors."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from curi.concepts import VOCABULARY, Concept, parse

__all__ = ["SPECIALS", "ConceptTokenizer", "ConceptDecoder"]

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class ConceptTokenizer:
    """Maps concepts to token ids: the four `SPECIALS` (ids 0-3) then `curi.concepts.VOCABULARY`.

    A concept is encoded as its canonical postfix tokens followed by ``<eos>``; batches are
    right-padded with ``<pad>``.
    """

    def __init__(self, vocabulary: Sequence[str] = VOCABULARY) -> None:
        self.itos: list[str] = list(SPECIALS) + [t for t in vocabulary if t not in SPECIALS]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (self.stoi[s] for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, concept: str | Concept) -> list[int]:
        """Ids of the concept's canonical tokens plus ``<eos>``.

        Raises:
            ConceptError: the concept string does not parse.
        """
        c = concept if isinstance(concept, Concept) else parse(concept)
        return [self.stoi.get(t, self.unk_id) for t in c.tokens()] + [self.eos_id]

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """The token string of `ids`, stopping at ``<eos>`` and skipping ``<pad>``/``<bos>``."""
        out = []
        for i in ids.tolist() if isinstance(ids, Tensor) else ids:
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(self.itos[i])
        return " ".join(out)

    def batch(self, concepts: Sequence[str | Concept], *, max_len: int | None = None) -> Tensor:
        """(B, L) int64 ids of `concepts`, right-padded with ``<pad>`` to the longest (or to
        `max_len`, a fixed width so batches stack across workers).

        Raises:
            ValueError: a concept is longer than `max_len`.
        """
        seqs = [self.encode(c) for c in concepts]
        width = max((len(s) for s in seqs), default=0) if max_len is None else max_len
        out = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        for i, s in enumerate(seqs):
            if len(s) > width:
                raise ValueError(f"concept {i} has {len(s)} tokens (with <eos>); max_len={width}")
            out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        return out


class ConceptDecoder(nn.Module):
    """LSTM decoder of concept tokens conditioned on the prototypes.

    The condition ``[c-, c+]`` is concatenated to the token embedding at every step and a
    linear map of it gives the initial (h, c) state. Embedding 128, hidden 128.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        cond_dim: int = 512,
        embed_dim: int = 128,
        hidden: int = 128,
        pad_id: int = 0,
        bos_id: int = 1,
    ) -> None:
        super().__init__()
        self.pad_id, self.bos_id, self.hidden = pad_id, bos_id, hidden
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.init_state = nn.Linear(cond_dim, 2 * hidden)
        self.lstm = nn.LSTM(embed_dim + cond_dim, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab_size)

    def _state(self, cond: Tensor) -> tuple[Tensor, Tensor]:
        h0, c0 = self.init_state(cond).chunk(2, dim=-1)  # (B, H) each
        return h0[None].contiguous(), c0[None].contiguous()  # (1, B, H) each

    def forward(self, cond: Tensor, targets: Tensor) -> Tensor:
        """Teacher-forced logits.

        Args:
            cond: (B, cond_dim) the condition, ``[c-, c+]`` flattened.
            targets: (B, L) int64 target ids (tokens, ``<eos>``, padding).

        Returns:
            (B, L, V) logits; step t predicts ``targets[:, t]`` from ``targets[:, :t]``.
        """
        b, length = targets.shape
        bos = targets.new_full((b, 1), self.bos_id)
        inputs = torch.cat([bos, targets[:, :-1]], dim=1)  # (B, L), shifted right
        x = self.embed(inputs)  # (B, L, E)
        x = torch.cat([x, cond[:, None, :].expand(-1, length, -1)], dim=-1)  # (B, L, E + C)
        h, _ = self.lstm(x, self._state(cond))  # (B, L, H)
        return self.out(h)  # (B, L, V)

    def loss(self, cond: Tensor, targets: Tensor) -> Tensor:
        """Cross-entropy per real (non-pad) token, averaged per concept, then over the batch."""
        logits = self(cond, targets)  # (B, L, V)
        ce = F.cross_entropy(
            logits.transpose(1, 2), targets, ignore_index=self.pad_id, reduction="none"
        )  # (B, L)
        real = (targets != self.pad_id).to(ce.dtype)  # (B, L)
        return ((ce * real).sum(1) / real.sum(1).clamp(min=1)).mean()

    @torch.no_grad()
    def greedy(self, cond: Tensor, *, max_len: int = 48) -> Tensor:
        """(B, max_len) greedily decoded ids (continue past ``<eos>``; decode with the
        tokenizer, which stops there)."""
        b = cond.shape[0]
        state = self._state(cond)
        tok = torch.full((b, 1), self.bos_id, dtype=torch.long, device=cond.device)
        out = []
        for _ in range(max_len):
            x = torch.cat([self.embed(tok), cond[:, None, :]], dim=-1)  # (B, 1, E + C)
            h, state = self.lstm(x, state)
            tok = self.out(h).argmax(-1)  # (B, 1)
            out.append(tok)
        return torch.cat(out, dim=1)
