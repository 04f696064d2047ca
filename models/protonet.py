"""The prototypical-network head (paper section 4.2): embed support and query scenes, average the
support embeddings per class into prototypes c- and c+, and classify by squared distance;
optionally add the concept-decoding loss. Also scores any scenes against episodes' prototypes."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from curi.errors import ConfigError, OptionError
from curi.models.decoder import ConceptDecoder, ConceptTokenizer
from curi.models.encoders import Encoder, get_encoder
from curi.models.poolers import Pooler, get_pooler

__all__ = [
    "ProtoOutput",
    "ProtoNet",
    "build_protonet",
    "count_parameters",
    "class_prototypes",
    "prototype_logits",
]

log = logging.getLogger(__name__)


def count_parameters(module: nn.Module, *, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters of `module`."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def class_prototypes(embeddings: Tensor, labels: Tensor) -> Tensor:
    """(B, 2, E) prototypes ``[c-, c+]``: mean support embedding per label.

    Args:
        embeddings: (B, S, E) support embeddings.
        labels: (B, S) bool or 0/1 labels. A class absent from an episode's support gets a zero
            prototype (episodes always hold both classes, so this only guards the division).
    """
    pos = labels.to(embeddings.dtype)[..., None]  # (B, S, 1)
    onehot = torch.cat([1 - pos, pos], dim=-1)  # (B, S, 2)
    sums = onehot.transpose(1, 2) @ embeddings  # (B, 2, E)
    counts = onehot.sum(1)[..., None].clamp(min=1)  # (B, 2, 1)
    return sums / counts


def prototype_logits(embeddings: Tensor, prototypes: Tensor) -> Tensor:
    """(B, N, 2) logits ``-||f(u) - c_y||^2`` for y in (0, 1) of (B, N, E) embeddings against
    (B, 2, E) prototypes; ``log_softmax`` of them is ``log p(y | u)``."""
    diff = embeddings[:, :, None, :] - prototypes[:, None, :, :]  # (B, N, 2, E)
    return -(diff * diff).sum(-1)


class ProtoOutput(NamedTuple):
    """What `ProtoNet.forward` returns.

    Attributes:
        logits: (B, Q, 2) query logits, index 1 = positive.
        loss: scalar, ``query_loss + alpha * concept_loss``.
        query_loss: scalar mean query negative log-likelihood.
        concept_loss: scalar decoder loss, or None when not computed (alpha = 0).
        prototypes: (B, 2, E) ``[c-, c+]``.
    """

    logits: Tensor
    loss: Tensor
    query_loss: Tensor
    concept_loss: Tensor | None
    prototypes: Tensor


class ProtoNet(nn.Module):
    """Prototypical network over an encoder and a pooler, with an optional concept decoder.

    Args:
        encoder: scenes -> objects (see `curi.models.encoders.Encoder`).
        pooler: objects -> (N, E) scene embeddings (see `curi.models.poolers.Pooler`).
        decoder: concept decoder conditioned on ``[c-, c+]``; needed when alpha > 0.
        alpha: weight of the concept loss.

    Raises:
        ConfigError: alpha > 0 without a decoder, or alpha < 0.
    """

    def __init__(
        self,
        encoder: Encoder,
        pooler: Pooler,
        *,
        decoder: ConceptDecoder | None = None,
        alpha: float = 0.0,
    ) -> None:
        super().__init__()
        if alpha < 0:
            raise ConfigError(f"alpha must be >= 0, got {alpha}")
        if alpha > 0 and decoder is None:
            raise ConfigError("alpha > 0 needs a concept decoder; pass decoder= or set alpha=0")
        self.encoder, self.pooler, self.decoder, self.alpha = encoder, pooler, decoder, alpha
        counts = self.parameter_counts()
        log.info(
            "ProtoNet(%s, %s): parameters %s",
            type(encoder).__name__,
            type(pooler).__name__,
            ", ".join(f"{k} {v:,}" for k, v in counts.items()),
        )

    def parameter_counts(self) -> dict[str, int]:
        """Trainable parameters of each part and in total."""
        parts = {"encoder": self.encoder, "pooler": self.pooler}
        if self.decoder is not None:
            parts["decoder"] = self.decoder
        counts = {k: count_parameters(m) for k, m in parts.items()}
        counts["total"] = count_parameters(self)
        return counts

    def embed(self, x: Tensor, mask: Tensor | None = None, *, chunk: int | None = None) -> Tensor:
        """(N, E) embeddings of N scenes x (N, ...) with optional object mask (N, K).

        `chunk` embeds at most that many scenes at a time (for evaluation sets; use it in
        eval mode, where BatchNorm does not depend on the batch).
        """
        if chunk is None or x.shape[0] <= chunk:
            return self.pooler(*self.encoder(x, mask))
        parts = []
        for i in range(0, x.shape[0], chunk):
            m = None if mask is None else mask[i : i + chunk]
            parts.append(self.pooler(*self.encoder(x[i : i + chunk], m)))
        return torch.cat(parts)

    def episode_prototypes(
        self, support: Tensor, support_labels: Tensor, support_mask: Tensor | None = None
    ) -> Tensor:
        """(B, 2, E) prototypes from support scenes (B, S, ...) and labels (B, S)."""
        b, s = support.shape[:2]
        m = None if support_mask is None else support_mask.flatten(0, 1)
        emb = self.embed(support.flatten(0, 1), m).float().reshape(b, s, -1)  # (B, S, E)
        return class_prototypes(emb, support_labels)

    @staticmethod
    def score(prototypes: Tensor, embeddings: Tensor) -> Tensor:
        """p(y = 1 | u) of every scene u against every episode's prototypes.

        Args:
            prototypes: (B, 2, E) ``[c-, c+]`` per episode.
            embeddings: (N, E) scene embeddings (e.g. the mAP evaluation set, embedded once).

        Returns:
            (B, N) probabilities. Uses ``softmax(-d)[1] = sigmoid(d- - d+)`` with
            ``d- - d+ = -2 u . (c- - c+) + |c-|^2 - |c+|^2``: one matrix product, no (B, N, E)
            difference tensor.
        """
        prototypes, embeddings = prototypes.float(), embeddings.float()
        c_neg, c_pos = prototypes[:, 0], prototypes[:, 1]  # (B, E) each
        bias = (c_neg * c_neg).sum(-1) - (c_pos * c_pos).sum(-1)  # (B,)
        margin = -2.0 * (c_neg - c_pos) @ embeddings.T + bias[:, None]  # (B, N)
        return torch.sigmoid(margin)

    def forward(self, batch: Mapping[str, Tensor]) -> ProtoOutput:
        """Run a batch of episodes.

        Args:
            batch: ``support`` (B, S, ...), ``support_labels`` (B, S), ``query`` (B, Q, ...),
                ``query_labels`` (B, Q); optional ``support_mask`` (B, S, K) and
                ``query_mask`` (B, Q, K) object masks (schema); ``concept_tokens`` (B, L)
                target ids from `ConceptTokenizer.batch` (required when alpha > 0).

        Returns:
            A `ProtoOutput`.

        Raises:
            KeyError: a required key is missing.
        """
        sup, qry = batch["support"], batch["query"]
        b, s = sup.shape[:2]
        q = qry.shape[1]
        # One encoder pass over support and query together: BatchNorm sees the whole episode.
        x = torch.cat([sup.flatten(0, 1), qry.flatten(0, 1)])  # (B * S + B * Q, ...)
        mask = None
        if batch.get("support_mask") is not None:
            masks = (batch["support_mask"], batch["query_mask"])
            mask = torch.cat([m.flatten(0, 1) for m in masks])  # (B * S + B * Q, K)
        # Distances in float32 whatever the autocast dtype of the embedding.
        emb = self.embed(x, mask).float()  # (B * (S + Q), E)
        sup_emb = emb[: b * s].reshape(b, s, -1)  # (B, S, E)
        qry_emb = emb[b * s :].reshape(b, q, -1)  # (B, Q, E)
        protos = class_prototypes(sup_emb, batch["support_labels"])  # (B, 2, E)
        logits = prototype_logits(qry_emb, protos)  # (B, Q, 2)
        target = batch["query_labels"].reshape(b * q).long()
        query_loss = F.cross_entropy(logits.reshape(b * q, 2), target)
        concept_loss = None
        loss = query_loss
        if self.alpha > 0:
            if "concept_tokens" not in batch:
                raise KeyError("alpha > 0 needs batch['concept_tokens'] (ConceptTokenizer.batch)")
            concept_loss = self.decoder.loss(protos.flatten(1), batch["concept_tokens"])
            loss = query_loss + self.alpha * concept_loss
        return ProtoOutput(logits, loss, query_loss, concept_loss, protos)


def build_protonet(
    *,
    encoder: str = "schema",
    pooler: str = "relation_net",
    embed_dim: int = 256,
    alpha: float = 0.0,
    encoder_kw: Mapping | None = None,
    pooler_kw: Mapping | None = None,
    decoder_kw: Mapping | None = None,
    tokenizer: ConceptTokenizer | None = None,
) -> ProtoNet:
    """Build a `ProtoNet` from registry names; the pooler is sized from the encoder.

    A decoder is built when alpha > 0 (vocabulary from `tokenizer`, default
    `ConceptTokenizer()`). Parameter counts are logged.

    Raises:
        ConfigError: unknown encoder or pooler name, or a bad option.
    """
    enc = get_encoder(encoder, **dict(encoder_kw or {}))
    sized = dict(
        in_dim=enc.out_dim, num_objects=enc.num_objects, pos_dim=enc.pos_dim, out_dim=embed_dim
    )
    fixed = sorted(set(sized) & set(pooler_kw or {}))
    if fixed:  # else a TypeError of two values for one keyword
        raise OptionError(
            f"bad option for pooler {pooler!r}: {fixed} are set from the encoder and embed_dim"
        )
    pool = get_pooler(pooler, **sized, **dict(pooler_kw or {}))
    dec = None
    if alpha > 0:
        tok = tokenizer or ConceptTokenizer()
        dec = ConceptDecoder(
            vocab_size=len(tok),
            cond_dim=2 * embed_dim,
            pad_id=tok.pad_id,
            bos_id=tok.bos_id,
            **dict(decoder_kw or {}),
        )
    return ProtoNet(enc, pool, decoder=dec, alpha=alpha)
