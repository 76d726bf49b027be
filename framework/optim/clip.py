"""Gradient clipping, in place on `param.grad`, before `optimizer.step()`.

>>> loss.backward()
>>> total = clip_grad_norm_(params, max_norm=1.0)   # the norm before clipping
>>> optimizer.step()
"""
import math

import numpy as np

from ..tensor import Tensor


def _grads(params, where):
    if isinstance(params, Tensor):
        params = [params]
    grads = []
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{where}: parameter {i} is a {type(p).__name__}, not a Tensor")
        if p.grad is not None:
            grads.append(p.grad.data)
    return grads


def clip_grad_norm_(params, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scale all gradients together so that their joint `norm_type`-norm is at most `max_norm`.

    The norm is taken over all gradients as if concatenated into one vector
    (`norm_type=inf` for the largest magnitude). Returns that total norm, before
    clipping, as a Python float; parameters without a gradient are ignored.
    """
    norm_type = float(norm_type)
    grads = _grads(params, "clip_grad_norm_")
    if not grads:
        return 0.0
    if norm_type == math.inf:
        total = max(float(np.max(np.abs(g), initial=0.0)) for g in grads)
    else:
        # float64 accumulation: float16/float32 squares overflow or lose digits on big models
        total = sum(float(np.sum(np.abs(g.astype(np.float64)) ** norm_type)) for g in grads)
        total = total ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"clip_grad_norm_: the total {norm_type}-norm of "
                           f"{len(grads)} gradients is {total}")
    coef = float(max_norm) / (total + 1e-6)
    if coef < 1.0:
        for g in grads:
            g *= coef
    return total


def clip_grad_value_(params, clip_value):
    """Clamp every gradient element into [-clip_value, clip_value], in place."""
    clip_value = float(clip_value)
    for g in _grads(params, "clip_grad_value_"):
        np.clip(g, -clip_value, clip_value, out=g)
