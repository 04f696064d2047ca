"""A relation network's g summed over the real pairs of each scene (Santoro et al. 2017; CURI
paper Appendix F), with every BatchNorm of g taking its statistics over real pairs only, in two
forms: a masked one of fixed shape (no host synchronisation, so a CUDA graph or
`torch.compile` can capture it) and a chunked one whose memory does not grow with the number
of pairs (the image grid's 80 cells make 6,400 pairs a scene)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

__all__ = ["chunked_pair_sum", "masked_batch_norm", "masked_pair_sum"]


def _wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32, or `dtype` if wider: statistics and sums over many pairs are never taken in
    float16 or bfloat16 (autocast), nor narrowed from float64."""
    return torch.promote_types(dtype, torch.float32)


def _wide(x: Tensor) -> Tensor:
    """x in `_wide_dtype` (itself, not a copy, if it is already)."""
    return x.to(_wide_dtype(x.dtype))


def _batch_statistics(bn: nn.BatchNorm1d) -> bool:
    """Whether `bn` normalises with the batch's statistics (training, or no running stats)."""
    return bn.training or bn.running_mean is None


def _update_running_stats(bn: nn.BatchNorm1d, mean: Tensor, var: Tensor, count: Tensor) -> None:
    """Do what `nn.BatchNorm1d` does to its buffers in a training step: count the batch, then
    move the running mean and the running unbiased variance toward the batch's by `momentum`
    (a cumulative average when `momentum` is None). `var` is the biased variance over `count`
    rows; a batch of one row (which `nn.BatchNorm1d` refuses) updates with it unchanged."""
    if not (bn.training and bn.track_running_stats):
        return
    with torch.no_grad():
        bn.num_batches_tracked.add_(1)
        factor = 1.0 / bn.num_batches_tracked if bn.momentum is None else bn.momentum
        unbiased = var * (count / (count - 1).clamp(min=1))
        bn.running_mean.mul_(1 - factor).add_(factor * mean.to(bn.running_mean.dtype))
        bn.running_var.mul_(1 - factor).add_(factor * unbiased.to(bn.running_var.dtype))


def _normalise(centred: Tensor, var: Tensor, bn: nn.BatchNorm1d) -> Tensor:
    """``centred / sqrt(var + eps)``, scaled and shifted by `bn`'s weight and bias if any."""
    scale = torch.rsqrt(var + bn.eps)  # (C,)
    if not bn.affine:
        return centred * scale
    return centred * (scale * bn.weight) + bn.bias


def masked_batch_norm(
    x: Tensor, keep: Tensor, bn: nn.BatchNorm1d, *, dtype: torch.dtype | None = None
) -> Tensor:
    """`bn` applied to the rows of `x` with its batch statistics taken over kept rows only.

    Equals ``bn(x[keep])`` on the kept rows, in value, gradient and the update of `bn`'s
    running statistics (Ioffe & Szegedy 2015), but keeps the shape of `x`: no boolean
    indexing, no host synchronisation. Other rows are zeroed first (so NaN or inf there
    cannot leak, not even into a gradient), then normalised with the same statistics; they
    are the caller's to discard.

    Args:
        x: (P, C) rows.
        keep: (P,) bool, the rows that count.
        bn: the module whose weight, bias, running statistics, momentum and eps are used.
        dtype: the dtype of the per-row element-wise work: None (float32 at least), or a
            narrower one (``torch.bfloat16``: half the memory traffic of an unfused step,
            about 3 significant digits); the statistics are summed in float32 either way.

    Returns:
        (P, C) in the dtype of `x`, computed in float32 at least (or in `dtype`).
    """
    if dtype is not None:
        return _narrow_batch_norm(x, keep, bn, dtype)
    k = keep[:, None]  # (P, 1)
    xf = torch.where(k, _wide(x), 0.0)
    if _batch_statistics(bn):
        count = keep.sum(dtype=xf.dtype)
        n = count.clamp(min=1)
        mean = xf.sum(0) / n  # (C,)
        centred = xf - mean  # (P, C)
        var = torch.where(k, centred.square(), 0.0).sum(0) / n  # (C,), biased
        _update_running_stats(bn, mean.detach(), var.detach(), count)
    else:
        centred, var = xf - bn.running_mean, bn.running_var
    return _normalise(centred, var, bn).to(x.dtype)


def _narrow_batch_norm(x: Tensor, keep: Tensor, bn: nn.BatchNorm1d, dtype: torch.dtype) -> Tensor:
    """`masked_batch_norm` with its (P, C) rows in `dtype`: the statistics summed in float32
    at least, the rows centred, scaled and shifted in `dtype`."""
    k = keep[:, None]  # (P, 1)
    wide = _wide_dtype(dtype)
    xn = torch.where(k, x.to(dtype), 0.0)  # (P, C)
    if _batch_statistics(bn):
        count = keep.sum(dtype=wide)
        n = count.clamp(min=1)
        mean = xn.sum(0, dtype=wide) / n  # (C,)
        centred = xn - mean.to(dtype)  # (P, C)
        var = torch.where(k, centred.square(), 0.0).sum(0, dtype=wide) / n  # (C,), biased
        _update_running_stats(bn, mean.detach(), var.detach(), count)
    else:
        centred, var = xn - bn.running_mean.to(dtype), bn.running_var
    scale = torch.rsqrt(var + bn.eps)  # (C,), wide
    if not bn.affine:
        return (centred * scale.to(dtype)).to(x.dtype)
    return (centred * (scale * bn.weight).to(dtype) + bn.bias.to(dtype)).to(x.dtype)


def _apply(module: nn.Module, x: Tensor, keep: Tensor, dtype: torch.dtype | None) -> Tensor:
    """One layer of g on pair rows: a BatchNorm masked to the kept rows, anything else as is."""
    if isinstance(module, nn.BatchNorm1d):
        return masked_batch_norm(x, keep, module, dtype=dtype)
    return module(x)


def _check_first_layer(g: nn.Sequential) -> None:
    """Refuse a g that does not begin with a BatchNorm1d: the pair paths rely on it to keep
    padding out of every gradient (and the chunked one for its statistics from per-object
    sums)."""
    if not isinstance(g[0], nn.BatchNorm1d):
        raise ValueError(f"g must begin with a BatchNorm1d, not {type(g[0]).__name__}")


def masked_pair_sum(
    h: Tensor, pair: Tensor, g: nn.Sequential, *, dtype: torch.dtype | None = None
) -> Tensor:
    """Sum of ``g(h_ij)`` over the real pairs of each scene, with fixed shapes throughout.

    Every pair goes through g, and every BatchNorm of g is `masked_batch_norm` over the real
    pairs, so the result equals running g on the real pairs alone; the first one zeroes
    padding pairs (so NaN or inf there reach no gradient), and they are dropped from the sum
    with `torch.where` (weight 0).

    Args:
        h: (B, K, K, C) pair features.
        pair: (B, K, K) bool, True for a pair of two real objects.
        g: BatchNorm1d first, then Linear, BatchNorm1d and element-wise layers acting on the
            last dimension.
        dtype: the BatchNorms' per-row dtype (`masked_batch_norm`; None: float32 at least).

    Returns:
        (B, C_out) in float32 at least: up to K * K terms would overflow float16 under
        autocast.
    """
    _check_first_layer(g)
    b, k, _, c = h.shape
    keep = pair.reshape(b * k * k)  # (B * K * K,)
    x = h.reshape(b * k * k, c)  # (B * K * K, C)
    for module in g:
        x = _apply(module, x, keep, dtype)
    if dtype is not None:  # summed in float32 without a float32 copy of the rows
        x = torch.where(keep[:, None], x, 0.0).reshape(b, k * k, -1)
        return x.sum(1, dtype=_wide_dtype(x.dtype))  # (B, C_out)
    x = _wide(torch.where(keep[:, None], x, 0.0))
    return x.reshape(b, k * k, -1).sum(1)  # (B, C_out)


@dataclass
class _Norm:
    """What one BatchNorm of g normalises with during one step of the chunked path: a mean and
    1 / std per channel (the batch's over real pairs, or the running ones), and the two global
    sums over real pairs that its training-mode backward needs (zero until backward has them,
    and for running statistics, whose backward needs none)."""

    mean: Tensor  # (C,) in the `_wide_dtype` of the pair rows
    rstd: Tensor  # (C,)
    count: Tensor  # () real pairs in the batch
    batch: bool  # the batch's statistics, not the running ones
    sum_dy: Tensor  # (C,) of the gradient at the layer's output
    sum_dy_xhat: Tensor  # (C,) of that gradient times the normalised input

    @classmethod
    def of(
        cls,
        bn: nn.BatchNorm1d,
        stats: tuple[Tensor, Tensor],
        count: Tensor,
        *,
        batch: bool,
        dtype: torch.dtype,
    ) -> _Norm:
        """The `_Norm` of `bn` normalising with `stats` (mean, biased variance) over `count`
        real pairs, in `dtype` (statistics come in float64; the pair rows stay as they are)."""
        mean, var = stats
        rstd = torch.rsqrt(var + bn.eps).to(dtype)
        zero = torch.zeros_like(rstd)
        return cls(mean.to(dtype), rstd, count, batch, zero, zero.clone())


def _capturing(x: Tensor) -> bool:
    """Whether `x` is on a CUDA device whose current stream is capturing a CUDA graph."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def _real(x: Tensor, keep: Tensor | None) -> Tensor:
    """x with the rows that are not real pairs zeroed (`keep` None: every row is real)."""
    return x if keep is None else torch.where(keep[:, None], x, 0.0)


class _FrozenBatchNorm(torch.autograd.Function):
    """A BatchNorm whose statistics and backward sums are given: forward normalises with the
    `_Norm`'s mean and rstd; backward is BatchNorm's training-mode one (Ioffe & Szegedy 2015),
    ``dx = w * rstd * (dy - sum_dy / n - x_hat * sum_dy_xhat / n)`` on real rows with the sums
    of the whole batch, so that autograd over one chunk of pairs gives exactly the gradient
    that the whole batch would. Padding rows get no gradient. Both are written as ``x * a + b``
    per channel, as ATen's CPU batch norm does, to touch each row once."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor | None, norm: _Norm, weight: Tensor, bias: Tensor):
        ctx.save_for_backward(x, keep, weight)
        ctx.norm = norm
        scale = norm.rstd * weight  # (C,)
        return torch.addcmul(bias - norm.mean * scale, x, scale).to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: Tensor):
        x, keep, weight = ctx.saved_tensors
        norm: _Norm = ctx.norm
        n = norm.count.clamp(min=1)
        scale = norm.rstd * weight  # (C,)
        slope = -scale * norm.rstd * (norm.sum_dy_xhat / n)  # (C,), of x
        shift = -scale * (norm.sum_dy / n) - slope * norm.mean  # (C,)
        dx = _real(torch.addcmul(torch.addcmul(shift, x, slope), dy, scale), keep).to(x.dtype)
        # Rows that are not real pairs have dy = 0 (g's top is summed over real rows only).
        d_weight = ((x - norm.mean) * dy).sum(0) * norm.rstd if ctx.needs_input_grad[3] else None
        d_bias = dy.sum(0, dtype=_wide_dtype(dy.dtype)) if ctx.needs_input_grad[4] else None
        return dx, None, None, d_weight, d_bias


class _Chunk(NamedTuple):
    """One chunk of scenes of the chunked path."""

    scenes: slice
    h: Tensor  # (c * K * K, C) pair rows, padding pairs zeroed
    keep: Tensor | None  # (c * K * K,) bool real pairs, None when all are
    count: Tensor  # () float64 real pairs


@dataclass
class _Pairs:
    """A batch's pairs ``h_ij = left_i + right_j``, produced `chunk` scenes at a time."""

    left: Tensor  # (N, K, C)
    right: Tensor  # (N, K, C)
    mask: Tensor  # (N, K) bool, real objects
    chunk: int

    def __post_init__(self) -> None:
        # One host synchronisation (this path runs eagerly anyway) saves every masking of pair
        # rows when all objects are real, as on image grids; but not while a CUDA graph is
        # captured, where a synchronisation ends the capture: the rows are masked instead,
        # so the path has fixed shapes and reads nothing back.
        self.all_real = not _capturing(self.mask) and bool(self.mask.all())

    @property
    def per_scene(self) -> int:
        """K * K pairs a scene, padding included."""
        return self.mask.shape[1] ** 2

    def __iter__(self) -> Iterator[_Chunk]:
        for lo in range(0, self.mask.shape[0], self.chunk):
            s = slice(lo, lo + self.chunk)
            m = self.mask[s]  # (c, K)
            c = m.sum(1, dtype=torch.float64)  # (c,)
            keep = None if self.all_real else (m[:, :, None] & m[:, None, :]).flatten()
            h = self.left[s, :, None] + self.right[s, None]  # (c, K, K, C)
            # Padding pairs zeroed, so that NaN or inf there reaches no gradient; `h` is
            # rebound so that this generator holds no second pair tensor.
            h = _real(h.flatten(0, 2), keep)  # (c * K * K, C)
            yield _Chunk(s, h, keep, (c * c).sum())


def _run(
    g: nn.Sequential,
    norms: dict[int, _Norm],
    x: Tensor,
    keep: Tensor | None,
    span: tuple[int, int],
    *,
    bn_grads: bool = False,
) -> Tensor:
    """Layers ``g[start:stop]`` on pair rows, every BatchNorm frozen at its `_Norm`; with
    `bn_grads` their weights and biases get gradients (else autograd would compute them in
    every pass)."""
    for i in range(*span):
        m = g[i]
        if i in norms:
            w, b = (m.weight, m.bias) if bn_grads else (m.weight.detach(), m.bias.detach())
            x = _FrozenBatchNorm.apply(x, keep, norms[i], w, b)
        else:
            x = m(x)
    return x


def _scene_sum(x: Tensor, keep: Tensor | None, per_scene: int) -> Tensor:
    """(c, C) sums per scene of the real rows of x (c * per_scene, C), float32 at least."""
    x = _wide(_real(x, keep))
    return x.reshape(-1, per_scene, x.shape[-1]).sum(1)


def _first_statistics(pairs: _Pairs) -> tuple[Tensor, Tensor]:
    """Mean and biased variance (C,) of ``h_ij = left_i + right_j`` over real pairs, from
    per-object sums in float64, with no pair built: with c real objects in a scene,
    ``sum_ij (l_i + r_j)^2 = c sum_i l_i^2 + 2 sum_i l_i sum_j r_j + c sum_j r_j^2``, taken
    for ``l = left - mean`` (so nothing cancels) after a first sum for the mean."""
    m = pairs.mask[..., None]  # (N, K, 1)
    c = pairs.mask.sum(1, keepdim=True, dtype=torch.float64)  # (N, 1)
    n = (c * c).sum().clamp(min=1)
    r = torch.where(m, pairs.right.double(), 0.0)  # (N, K, C)
    sr = r.sum(1)  # (N, C)
    mean = (c * (torch.where(m, pairs.left.double(), 0.0).sum(1) + sr)).sum(0) / n  # (C,)
    lc = torch.where(m, pairs.left.double() - mean, 0.0)  # (N, K, C)
    m2 = c * lc.square().sum(1) + 2 * lc.sum(1) * sr + c * r.square().sum(1)  # (N, C)
    return mean, m2.sum(0) / n


def _chunk_statistics(
    g: nn.Sequential, norms: dict[int, _Norm], i: int, pairs: _Pairs
) -> tuple[Tensor, Tensor]:
    """Mean and biased variance (C,) over real pairs of the input of ``g[i]``, chunk by chunk,
    each chunk's mean and centred sum of squares merged in float64 (Chan et al. 1979)."""
    count = mean = m2 = torch.zeros((), dtype=torch.float64, device=pairs.mask.device)
    for chunk in pairs:
        x = _wide(_run(g, norms, chunk.h, chunk.keep, (0, i)))  # (P, C)
        n = chunk.count
        chunk_mean = _real(x, chunk.keep).sum(0).double() / n.clamp(min=1)
        centred = _real(x - chunk_mean.to(x.dtype), chunk.keep)
        total = count + n
        delta = chunk_mean - mean
        mean = mean + delta * (n / total.clamp(min=1))
        m2 = (
            m2
            + centred.square().sum(0).double()
            + delta.square() * (count * n / total.clamp(min=1))
        )
        count = total
    return mean, m2 / count.clamp(min=1)


def _forward_norms(g: nn.Sequential, pairs: _Pairs) -> dict[int, _Norm]:
    """The `_Norm` of every BatchNorm of g, lowest first (each pass runs the layers below it
    with their statistics), updating running statistics as ``nn.BatchNorm1d`` would."""
    c = pairs.mask.sum(1, dtype=torch.float64)  # (N,) real objects a scene
    count = (c * c).sum()
    dtype = _wide_dtype(pairs.left.dtype)
    norms: dict[int, _Norm] = {}
    for i, bn in enumerate(g):
        if not isinstance(bn, nn.BatchNorm1d):
            continue
        if not _batch_statistics(bn):
            running = (bn.running_mean, bn.running_var)
            norms[i] = _Norm.of(bn, running, count, batch=False, dtype=dtype)
            continue
        stats = _first_statistics(pairs) if i == 0 else _chunk_statistics(g, norms, i, pairs)
        _update_running_stats(bn, *stats, count)
        norms[i] = _Norm.of(bn, stats, count, batch=True, dtype=dtype)
    return norms


def _backward_sums(
    g: nn.Sequential, norms: dict[int, _Norm], i: int, pairs: _Pairs, d_out: Tensor
) -> None:
    """Fill in the backward sums of the BatchNorm ``g[i]`` (those above it already known): per
    chunk, recompute up to its output, backpropagate `d_out` to there, and sum."""
    norm = norms[i]
    sum_dy = sum_dy_xhat = torch.zeros_like(norm.mean, dtype=torch.float64)
    for chunk in pairs:
        with torch.no_grad():
            x = _run(g, norms, chunk.h, chunk.keep, (0, i))
            y = _run(g, norms, x, chunk.keep, (i, i + 1)).requires_grad_()
        top = _run(g, norms, y, chunk.keep, (i + 1, len(g)))
        top = _scene_sum(top, chunk.keep, pairs.per_scene)
        (dy,) = torch.autograd.grad(top, y, d_out[chunk.scenes])  # 0 off real pairs
        dy = _wide(dy)  # (P, C)
        sum_dy = sum_dy + dy.sum(0).double()
        sum_dy_xhat = sum_dy_xhat + ((_wide(x) - norm.mean) * dy).sum(0).double()
    norm.sum_dy = sum_dy.to(norm.mean.dtype)
    norm.sum_dy_xhat = (sum_dy_xhat * norm.rstd.double()).to(norm.mean.dtype)


def _object_grads(
    pairs: _Pairs, norm: _Norm, bn: nn.BatchNorm1d, dy_i: Tensor, dy_j: Tensor
) -> tuple[Tensor, Tensor]:
    """Gradients (N, K, C) of left and right through the first BatchNorm, from the sums over
    j and over i of its output's gradient (dy_i, dy_j): ``dh_ij = w rstd (dy_ij - sum_dy / n -
    x_hat_ij sum_dy_xhat / n)`` summed over j needs only ``sum_j x_hat_ij = rstd (c (l_i -
    mean) + sum_j r_j)`` (c real objects), and likewise over i."""
    m = pairs.mask[..., None]  # (N, K, 1)
    c = pairs.mask.sum(1, dtype=norm.mean.dtype)[:, None, None]  # (N, 1, 1)
    n = norm.count.to(norm.mean.dtype).clamp(min=1)
    lc = torch.where(m, _wide(pairs.left) - norm.mean, 0.0)  # (N, K, C)
    r = torch.where(m, _wide(pairs.right), 0.0)
    shift = c * (norm.sum_dy / n)  # (N, 1, C)
    slope = norm.rstd * (norm.sum_dy_xhat / n)  # (C,)
    d_left = dy_i - shift - slope * (c * lc + r.sum(1, keepdim=True))
    d_right = dy_j - shift - slope * (c * r + lc.sum(1, keepdim=True))
    scale = norm.rstd * bn.weight
    return torch.where(m, scale * d_left, 0.0), torch.where(m, scale * d_right, 0.0)


def _last_pass(
    g: nn.Sequential, norms: dict[int, _Norm], pairs: _Pairs, d_out: Tensor, wanted: list[Tensor]
) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
    """Per chunk, backpropagate `d_out` from the top of g to the first BatchNorm's output
    (every sum above known), gathering the gradients of `wanted` (parameters above it); then
    the first BatchNorm's own sums and parameter gradients, and those of left and right.

    Returns:
        d left, d right, [d weight, d bias] of the first BatchNorm, the gradients of `wanted`.
    """
    norm, bn = norms[0], g[0]
    k = pairs.mask.shape[1]
    dy_i = torch.zeros_like(pairs.left, dtype=norm.mean.dtype)  # (N, K, C)
    dy_j = torch.zeros_like(dy_i)
    sum_dy = sum_dy_xhat = torch.zeros_like(norm.mean, dtype=torch.float64)
    grads = [torch.zeros_like(p) for p in wanted]
    for chunk in pairs:
        with torch.no_grad():
            y = _run(g, norms, chunk.h, chunk.keep, (0, 1)).requires_grad_()
        top = _run(g, norms, y, chunk.keep, (1, len(g)), bn_grads=True)
        top = _scene_sum(top, chunk.keep, pairs.per_scene)
        dy, *more = torch.autograd.grad(top, [y, *wanted], d_out[chunk.scenes])
        for total, part in zip(grads, more, strict=True):
            total += part
        dy = _wide(dy)  # (P, C), 0 off real pairs
        sum_dy = sum_dy + dy.sum(0).double()
        sum_dy_xhat = sum_dy_xhat + ((_wide(chunk.h) - norm.mean) * dy).sum(0).double()
        dy = dy.reshape(-1, k, k, dy.shape[-1])  # (c, K, K, C)
        dy_i[chunk.scenes], dy_j[chunk.scenes] = dy.sum(2), dy.sum(1)
    d_bias = sum_dy.to(norm.mean.dtype)
    d_weight = (sum_dy_xhat * norm.rstd.double()).to(norm.mean.dtype)
    if norm.batch:
        norm.sum_dy, norm.sum_dy_xhat = d_bias, d_weight
    return (*_object_grads(pairs, norm, bn, dy_i, dy_j), [d_weight, d_bias], grads)


class _ChunkedPairSum(torch.autograd.Function):
    """`chunked_pair_sum` as one autograd node that saves only left, right and the mask."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, left, right, mask, g: nn.Sequential, chunk: int, *params):
        pairs = _Pairs(left, right, mask, chunk)
        norms = _forward_norms(g, pairs)
        out = [
            _scene_sum(
                _run(g, norms, chunk.h, chunk.keep, (0, len(g))), chunk.keep, pairs.per_scene
            )
            for chunk in pairs
        ]
        ctx.save_for_backward(left, right, mask)
        ctx.g, ctx.chunk, ctx.norms = g, chunk, norms
        return torch.cat(out)  # (N, C_out)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    @once_differentiable
    def backward(ctx, d_out):
        g, norms = ctx.g, ctx.norms
        # Detached: the passes below run with grad enabled, and a graph back to left and
        # right would keep every chunk's temporaries alive.
        pairs = _Pairs(*(t.detach() for t in ctx.saved_tensors), ctx.chunk)
        upper = [p for m in list(g)[1:] for p in m.parameters()]
        needs = ctx.needs_input_grad[5 + len(list(g[0].parameters())) :]
        wanted = [p for p, need in zip(upper, needs, strict=True) if need]
        with torch.enable_grad():
            for i in sorted((i for i in norms if i and norms[i].batch), reverse=True):
                _backward_sums(g, norms, i, pairs, d_out)  # top BatchNorm first
            d_left, d_right, bn_grads, grads = _last_pass(g, norms, pairs, d_out, wanted)
        it = iter(grads)
        upper_grads = [next(it) if need else None for need in needs]
        return (
            d_left.to(pairs.left.dtype),
            d_right.to(pairs.right.dtype),
            None,
            None,
            None,
            *bn_grads,
            *upper_grads,
        )


@torch.compiler.disable
def chunked_pair_sum(
    left: Tensor, right: Tensor, mask: Tensor, g: nn.Sequential, *, chunk: int
) -> Tensor:
    """Sum of ``g(left_i + right_j)`` over the real pairs (i, j) of each scene, `chunk` scenes
    at a time, in memory that does not grow with the number of scenes.

    Equals `masked_pair_sum` of the pair tensor ``left[:, :, None] + right[:, None]`` in
    value, gradients of left, right and g's parameters, and the update of running statistics,
    up to float rounding, with BatchNorm's statistics over the whole batch's real pairs: the
    forward takes one pass over the chunks per BatchNorm above the first (whose statistics
    come from per-object sums) and one for the sums; the backward recomputes each chunk, one
    pass per BatchNorm above the first for the two global sums its backward needs (top first)
    and one for the gradients (the first BatchNorm's sums come with it, as do the gradients
    of left and right, again from per-object sums). For g's 4 layers that is 24 matrix
    products where the dense path has 9; only left, right and the mask are saved. Runs
    eagerly (`torch.compile` breaks the graph here).

    Args:
        left: (N, K, C) the term of object i in g's first layer, bias included.
        right: (N, K, C) the term of object j.
        mask: (N, K) bool, real objects; a pair is real when both of its objects are.
        g: BatchNorm1d first, then Linear, affine BatchNorm1d and element-wise layers.
        chunk: scenes per chunk.

    Returns:
        (N, C_out) in float32 at least.
    """
    _check_first_layer(g)
    if chunk < 1:
        raise ValueError(f"chunk must be at least one scene, got {chunk}")
    return _ChunkedPairSum.apply(left, right, mask, g, chunk, *g.parameters())
