"""Poolers that turn a set of objects into one scene vector (paper Appendix F):
masked average, concatenation, relation network and transformer, with a name registry.
Every pooler ignores padded objects: their values, and their number, never change the output.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from curi.errors import ConfigError
from curi.models.relation_pairs import chunked_pair_sum, masked_pair_sum
from curi.registry import Registry

__all__ = [
    "POOLERS",
    "Pooler",
    "AvgPooler",
    "ConcatPooler",
    "RelationNetPooler",
    "TransformerPooler",
    "mlp",
    "get_pooler",
    "list_poolers",
    "register_pooler",
    "set_elementwise_dtype",
]


def mlp(dims: Sequence[int], *, batch_norm: bool = True) -> nn.Sequential:
    """Linear layers ``dims[0] -> ... -> dims[-1]`` with (BatchNorm +) ReLU between them and a
    plain linear output; weights Xavier-uniform, biases zero."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            if batch_norm:
                layers.append(nn.BatchNorm1d(b))
            layers.append(nn.ReLU())
    seq = nn.Sequential(*layers)
    _xavier(seq)
    return seq


def _xavier(module: nn.Module) -> None:
    """Xavier-uniform weights and zero biases for every Linear in `module` (paper Appendix E)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def _masked(x: Tensor, mask: Tensor) -> Tensor:
    """x with padded rows set to zero (where(), so NaN or inf in padding cannot leak)."""
    return torch.where(mask[..., None], x, torch.zeros((), dtype=x.dtype, device=x.device))


class Pooler(nn.Module):
    """Contract of a pooler: ``forward(objects (B, K, D), mask (B, K), positions (B, K, P) or
    None) -> (B, out_dim)``. Padded objects (mask False) do not influence the output, in train
    or eval mode. Built with keyword options ``in_dim`` (D), ``num_objects`` (K), ``pos_dim``
    (P, 0 without positions) and ``out_dim``."""

    out_dim: int

    def forward(self, objects: Tensor, mask: Tensor, positions: Tensor | None = None) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def _with_positions(objects: Tensor, mask: Tensor, positions: Tensor | None) -> Tensor:
        """(B, K, D + P): objects and absolute positions, padding zeroed."""
        x = objects if positions is None else torch.cat([objects, positions], dim=-1)
        return _masked(x, mask)


POOLERS: Registry[type[Pooler]] = Registry(
    "pooler",
    # the original release's names
    aliases={"avg_pool": "avg", "gap": "avg", "rel_net": "relation_net", "trnsf": "transformer"},
)
"""The poolers by name; `curi.errors.OptionError` for an unknown name or a bad option."""
register_pooler = POOLERS.register
"""Class decorator: ``@register_pooler("avg")`` makes a pooler available by name."""


def list_poolers() -> list[str]:
    """Names of the registered poolers, sorted."""
    return POOLERS.names()


def get_pooler(name: str, **kwargs) -> Pooler:
    """Build a registered pooler by name (``avg``, ``concat``, ``relation_net``,
    ``transformer``; ``-`` and ``_`` are interchangeable; the original release's names
    ``gap``, ``rel_net``, ``trnsf`` are accepted).

    Raises:
        OptionError: (a `ConfigError`) an unknown name, an option the pooler does not take,
            a missing one, or a value of the wrong type or range.
    """
    return POOLERS.build(name, **kwargs)


@register_pooler("avg")
class AvgPooler(Pooler):
    """Mean over real objects (with their absolute positions), then an MLP
    in -> 256 -> 512 -> 384 -> out with BatchNorm and ReLU."""

    def __init__(
        self,
        *,
        in_dim: int,
        num_objects: int,
        pos_dim: int = 0,
        out_dim: int = 256,
        hidden: Sequence[int] = (256, 512, 384),
    ) -> None:
        super().__init__()
        self.out_dim = out_dim
        self.mlp = mlp([in_dim + pos_dim, *hidden, out_dim])

    def forward(self, objects: Tensor, mask: Tensor, positions: Tensor | None = None) -> Tensor:
        x = self._with_positions(objects, mask, positions)  # (B, K, D + P)
        n = mask.sum(1, keepdim=True).clamp(min=1).to(x.dtype)  # (B, 1)
        return self.mlp(x.sum(1) / n)  # (B, out)


@register_pooler("concat")
class ConcatPooler(Pooler):
    """Concatenation of the K object slots (padding zeroed), then an MLP
    K * D -> 256 -> 512 -> 256 -> out. Positions are implicit in the fixed slot order."""

    def __init__(
        self,
        *,
        in_dim: int,
        num_objects: int,
        pos_dim: int = 0,
        out_dim: int = 256,
        hidden: Sequence[int] = (256, 512, 256),
    ) -> None:
        super().__init__()
        self.out_dim = out_dim
        self.num_objects = num_objects
        self.mlp = mlp([num_objects * in_dim, *hidden, out_dim])

    def forward(self, objects: Tensor, mask: Tensor, positions: Tensor | None = None) -> Tensor:
        if objects.shape[1] != self.num_objects:
            raise ValueError(
                f"concat pooler was built for {self.num_objects} objects, got {objects.shape[1]}"
            )
        x = _masked(objects, mask)  # (B, K, D)
        return self.mlp(x.flatten(1))  # (B, K * D) -> (B, out)


# The automatic choice of `RelationNetPooler`'s pair path, in pair activations (scenes x K x K
# x g_dim elements): g holds about eight tensors of that size for backward when dense, so
# larger batches are chunked, into chunks of a size that keeps g's working set in hundreds of MB.
# These are the CPU's limits; a GPU's follow its memory (`pair_limits`).
DENSE_PAIR_LIMIT = 2**27
PAIR_CHUNK_ELEMENTS = 2**24
# On a GPU the dense path runs while g's tensors, at most about `BYTES_PER_PAIR_ELEMENT` per
# pair activation, fit in `DENSE_MEMORY_SHARE` of the device's memory (on an H200 the dense
# image step ran at batch 32, 2.6e9 activations, and ran out of its 140 GiB at batch 64: 27 to
# 54 bytes each), and chunks hold an eighth of that: the chunked path recomputes g, which made
# the image step at batch 8 5x slower there than the dense one, so it is kept for what does
# not fit.
BYTES_PER_PAIR_ELEMENT = 64
DENSE_MEMORY_SHARE = 0.4
_CPU = torch.device("cpu")


def pair_limits(device: torch.device) -> tuple[int, int]:
    """(dense limit, chunk size) of the relation net's pair path on `device`, in pair
    activations: `DENSE_PAIR_LIMIT` and `PAIR_CHUNK_ELEMENTS` but on CUDA, where they grow
    with the device's memory (never below the CPU's)."""
    if device.type != "cuda":
        return DENSE_PAIR_LIMIT, PAIR_CHUNK_ELEMENTS
    budget = int(device_memory(device) * DENSE_MEMORY_SHARE) // BYTES_PER_PAIR_ELEMENT
    dense = max(DENSE_PAIR_LIMIT, budget)
    return dense, max(PAIR_CHUNK_ELEMENTS, dense // 8)


@torch.compiler.assume_constant_result  # traced code takes the number, not the query
@functools.cache
def device_memory(device: torch.device) -> int:
    """Total bytes of memory of a CUDA device (read once: it does not change, and reading it
    is safe while a CUDA graph is captured; `torch.compile` takes it as a constant)."""
    return int(torch.cuda.get_device_properties(device).total_memory)


@register_pooler("relation_net")
class RelationNetPooler(Pooler):
    """Relation network (Santoro et al. 2017): g over every ordered pair (i, j) of real
    objects (self-pairs included) of ``[o_i, o_j, p_j - p_i]``, summed, then f.

    g has 4 layers of 256 (BatchNorm + ReLU), f is 256 -> 256 -> out; Xavier init. The relative
    position ``p_j - p_i`` comes from each object's own normalised coordinates (the original
    computed grid offsets with the wrong row length). The first layer of g is linear, so it is
    evaluated per object (``W [o_i, o_j, p_j - p_i] = (W_1 o_i - W_3 p_i) + (W_2 o_j + W_3 p_j)``)
    and broadcast over pairs: exact, and K times cheaper than building the pair tensor.

    BatchNorm statistics in g are taken over real pairs only, by one of three paths that give
    the same numbers up to float rounding (`curi.models.relation_pairs`; docs/benchmarks.md):

    - chunked, when the batch's pair tensor is large (image grids: 6,400 pairs a scene):
      `chunked_pair_sum`, memory bounded by the chunk; 24 matrix products of g instead of 9;
    - indexed, on the CPU in eager mode: g on the real pairs alone (``h[pair]``), about half
      the rows of schema scenes and faster there than the masked path; its data-dependent
      shape costs a host synchronisation, which is free on the CPU;
    - masked otherwise (CUDA, under `torch.compile`, or with a narrower
      ``elementwise_dtype``): `masked_pair_sum`, every pair through g with BatchNorm masked to
      real pairs: fixed shapes and no host synchronisation, so the step can be captured in a
      CUDA graph or compiled whole.

    Args:
        pair_chunk: scenes per chunk of the chunked path; 0 never chunks; None (default)
            chunks when a batch has more pair activations than the device's dense limit
            (`pair_limits`; on a CPU image batches from 2 episodes on, schema never at the
            paper's batch of 64; on an 80 GB GPU image batches from 7 episodes on).
    """

    # Eager CPU code takes the indexed path; False gives it the masked path that compiled and
    # CUDA code take, so the two can be compared step for step (the paths agree up to rounding,
    # which Adam amplifies in the biases a BatchNorm cancels, whose true gradient is zero).
    indexed_on_cpu: bool = True
    # The masked path's per-row BatchNorm dtype (``train.elementwise_dtype``, set by
    # `set_elementwise_dtype`): None is float32 at least; a narrower one runs the masked path
    # on the CPU too, so that the option means the same everywhere.
    elementwise_dtype: torch.dtype | None = None

    def __init__(
        self,
        *,
        in_dim: int,
        num_objects: int,
        pos_dim: int = 0,
        out_dim: int = 256,
        g_dim: int = 256,
        g_layers: int = 4,
        f_hidden: Sequence[int] = (256, 256),
        pair_chunk: int | None = None,
    ) -> None:
        super().__init__()
        if g_layers < 2:
            raise ConfigError(f"relation-net g needs at least 2 layers, got {g_layers}")
        if pair_chunk is not None and pair_chunk < 0:
            raise ValueError(f"pair_chunk must be None, 0 or a number of scenes, got {pair_chunk}")
        self.out_dim = out_dim
        self.in_dim, self.pos_dim, self.g_dim = in_dim, pos_dim, g_dim
        self.pair_chunk = pair_chunk
        self.g_in = nn.Linear(2 * in_dim + pos_dim, g_dim)
        rest: list[nn.Module] = [nn.BatchNorm1d(g_dim), nn.ReLU()]
        for i in range(g_layers - 1):
            rest.append(nn.Linear(g_dim, g_dim))
            if i < g_layers - 2:
                rest.append(nn.BatchNorm1d(g_dim))
            rest.append(nn.ReLU())
        self.g_rest = nn.Sequential(*rest)
        self.f = mlp([g_dim, *f_hidden, out_dim])
        _xavier(self)

    def pair_terms(self, objects: Tensor, positions: Tensor | None) -> tuple[Tensor, Tensor]:
        """(B, K, g_dim) twice: the terms of o_i (bias included) and of o_j in g's first
        linear layer, whose sum over a pair is that layer's output."""
        d = self.in_dim
        w, bias = self.g_in.weight, self.g_in.bias  # (H, 2D + P), (H,)
        left = objects @ w[:, :d].T + bias  # (B, K, H), the term of o_i
        right = objects @ w[:, d : 2 * d].T  # (B, K, H), the term of o_j
        if self.pos_dim:
            if positions is None or positions.shape[-1] != self.pos_dim:
                raise ValueError(f"relation-net was built for {self.pos_dim}-d positions")
            wp = positions @ w[:, 2 * d :].T  # (B, K, H)
            left, right = left - wp, right + wp
        return left, right

    def first_layer(self, objects: Tensor, positions: Tensor | None) -> Tensor:
        """(B, K, K, g_dim): g's first linear layer on every pair ``[o_i, o_j, p_j - p_i]``."""
        left, right = self.pair_terms(objects, positions)
        return left[:, :, None, :] + right[:, None, :, :]  # (B, K, K, H)

    def chunk_scenes(self, scenes: int, num_objects: int, device: torch.device = _CPU) -> int:
        """Scenes per chunk of the chunked path for a batch of this size on `device`, 0 for
        no chunks (`pair_limits`)."""
        if self.pair_chunk is not None:
            return self.pair_chunk
        dense, chunk = pair_limits(device)
        per_scene = num_objects * num_objects * self.g_dim
        if scenes * per_scene <= dense:
            return 0
        return max(1, chunk // per_scene)

    def forward(self, objects: Tensor, mask: Tensor, positions: Tensor | None = None) -> Tensor:
        b, k, _ = objects.shape
        objects = _masked(objects, mask)
        if positions is not None:
            positions = _masked(positions, mask)
        left, right = self.pair_terms(objects, positions)  # (B, K, H) each
        chunk = self.chunk_scenes(b, k, objects.device)
        if chunk:
            return self.f(chunked_pair_sum(left, right, mask, self.g_rest, chunk=chunk))
        h = left[:, :, None, :] + right[:, None, :, :]  # (B, K, K, H)
        pair = mask[:, :, None] & mask[:, None, :]  # (B, K, K)
        dtype = self.elementwise_dtype
        if (
            self.indexed_on_cpu
            and dtype is None
            and h.device.type == "cpu"
            and not torch.compiler.is_compiling()
        ):
            return self.f(self._indexed_sum(h, pair))
        return self.f(masked_pair_sum(h, pair, self.g_rest, dtype=dtype))

    def _indexed_sum(self, h: Tensor, pair: Tensor) -> Tensor:
        """(B, H) sums of g over real pairs, g run on the real pairs alone; in float32 at
        least: up to K * K = 6400 terms would overflow float16 under autocast."""
        b, k = pair.shape[:2]
        wide = torch.promote_types(h.dtype, torch.float32)
        if bool(pair.all()):
            rel = self.g_rest(h.reshape(b * k * k, self.g_dim))  # (B * K * K, H)
            return rel.reshape(b, k * k, self.g_dim).sum(1, dtype=wide)  # (B, H)
        rel = self.g_rest(h[pair])  # (N_pairs, H)
        owner = torch.arange(b, device=h.device)[:, None, None].expand(b, k, k)[pair]
        summed = torch.zeros(b, self.g_dim, dtype=wide, device=h.device)  # (B, H)
        return summed.index_add_(0, owner, rel.to(wide))


def set_elementwise_dtype(model: nn.Module, dtype: torch.dtype | None) -> None:
    """Give every relation net in `model` the per-row dtype of its masked BatchNorms
    (`curi.models.relation_pairs.masked_batch_norm`; None: float32 at least). The chunked path
    (image grids) keeps float32; other poolers have no masked BatchNorm."""
    for m in model.modules():
        if isinstance(m, RelationNetPooler):
            m.elementwise_dtype = dtype


@register_pooler("transformer")
class TransformerPooler(Pooler):
    """Transformer encoder (4 layers, 2 heads, feed-forward 512, key padding mask) over the
    objects (with absolute positions, linearly projected to ``d_model``), then the
    concatenation of masked max, min, sum and mean over real objects, linear to out
    (read-out after Wang et al. 2019)."""

    def __init__(
        self,
        *,
        in_dim: int,
        num_objects: int,
        pos_dim: int = 0,
        out_dim: int = 256,
        d_model: int = 128,
        num_layers: int = 4,
        num_heads: int = 2,
        dim_feedforward: int = 512,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ConfigError(f"d_model {d_model} must be divisible by num_heads {num_heads}")
        self.out_dim = out_dim
        self.proj = nn.Linear(in_dim + pos_dim, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, num_heads, dim_feedforward, dropout=dropout, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.readout = nn.Linear(4 * d_model, out_dim)
        _xavier(self)

    def forward(self, objects: Tensor, mask: Tensor, positions: Tensor | None = None) -> Tensor:
        x = self.proj(self._with_positions(objects, mask, positions))  # (B, K, E)
        has_any = mask.any(1, keepdim=True)  # (B, 1)
        # A scene without objects would make attention all -inf (NaN); let it attend to its
        # (zeroed) slots instead; the read-out below still ignores them.
        pad = ~mask & has_any  # (B, K), True = ignored key
        h = self.encoder(x, src_key_padding_mask=pad)  # (B, K, E)
        m = mask[..., None]  # (B, K, 1)
        big = torch.finfo(h.dtype).max
        hmax = torch.where(m, h, -big).amax(1)  # (B, E)
        hmin = torch.where(m, h, big).amin(1)  # (B, E)
        hsum = torch.where(m, h, 0.0).sum(1)  # (B, E)
        hmean = hsum / mask.sum(1, keepdim=True).clamp(min=1).to(h.dtype)
        feats = torch.cat([hmax, hmin, hsum, hmean], dim=-1)  # (B, 4E)
        feats = torch.where(has_any, feats, 0.0)
        return self.readout(feats)  # (B, out)
