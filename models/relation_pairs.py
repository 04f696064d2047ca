"""A relation network's g summed over the real pairs of each scene (Santoro et al. 2017; CURI
paper Appendix F), with every BatchNorm of g taking its statistics over real pairs only, in a
masked form of fixed shape: no host synchronisation, so a CUDA graph or `torch.compile` can
capture it."""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["masked_batch_norm", "masked_pair_sum"]


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


def masked_batch_norm(x: Tensor, keep: Tensor, bn: nn.BatchNorm1d) -> Tensor:
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

    Returns:
        (P, C) in the dtype of `x`, computed in float32 at least.
    """
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


def _apply(module: nn.Module, x: Tensor, keep: Tensor) -> Tensor:
    """One layer of g on pair rows: a BatchNorm masked to the kept rows, anything else as is."""
    return masked_batch_norm(x, keep, module) if isinstance(module, nn.BatchNorm1d) else module(x)


def _check_first_layer(g: nn.Sequential) -> None:
    """Refuse a g that does not begin with a BatchNorm1d: the masked path relies on it to
    keep padding out of every gradient."""
    if not isinstance(g[0], nn.BatchNorm1d):
        raise ValueError(f"g must begin with a BatchNorm1d, not {type(g[0]).__name__}")


def masked_pair_sum(h: Tensor, pair: Tensor, g: nn.Sequential) -> Tensor:
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

    Returns:
        (B, C_out) in float32 at least: up to K * K terms would overflow float16 under
        autocast.
    """
    _check_first_layer(g)
    b, k, _, c = h.shape
    keep = pair.reshape(b * k * k)  # (B * K * K,)
    x = h.reshape(b * k * k, c)  # (B * K * K, C)
    for module in g:
        x = _apply(module, x, keep)
    x = _wide(torch.where(keep[:, None], x, 0.0))
    return x.reshape(b, k * k, -1).sum(1)  # (B, C_out)
