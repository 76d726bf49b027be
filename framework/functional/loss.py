"""Losses as compositions of primitives, with PyTorch's semantics and reductions.

>>> import tianyuan as ty, tianyuan.functional as F
>>> logits = ty.randn(4, 10, requires_grad=True)
>>> F.cross_entropy(logits, ty.tensor([1, 0, 9, 3])).backward()
"""
import numpy as np

from .. import dtypes
from ..ops import activation as A
from ..tensor import Tensor, as_tensor
from . import math as M
from .activation import log_softmax, sigmoid

_REDUCTIONS = ("none", "mean", "sum")


def _reduce(loss, reduction, op):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return M.sum(loss)
    if reduction == "mean":
        return M.mean(loss)
    raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _float_input(x, op, what="input"):
    x = as_tensor(x)
    if not dtypes.is_floating(x.dtype):
        raise TypeError(f"{op}: {what} must be floating point, got dtype {x.dtype} "
                        f"(shape {x.shape})")
    return x


def _same_shape(x, y, op, what="target"):
    """`y` as a float tensor of x's dtype and shape, or an error naming both shapes."""
    y = as_tensor(y)
    if y.shape != x.shape:
        raise ValueError(f"{op}: {what} shape {y.shape} differs from input shape {x.shape}")
    if not dtypes.is_floating(y.dtype):
        y = y.astype(x.dtype)
    return y


# ---------------------------------------------------------------- classification

def _check_ce_target(logits, target, op):
    target = as_tensor(target)
    if dtypes.is_floating(target.dtype) or target.dtype == dtypes.bool_:
        raise TypeError(f"{op}: target must hold integer class indices, got dtype {target.dtype} "
                        f"(shape {target.shape}) for logits of shape {logits.shape}")
    expected = logits.shape[:1] + logits.shape[2:]
    if target.shape != expected:
        raise ValueError(f"{op}: target shape {target.shape} does not match logits shape "
                         f"{logits.shape}; expected {expected} (logits are (N, C, ...))")
    return target.data.astype(np.int64, copy=False)


def _class_weights(weight, num_classes, dtype, op):
    if weight is None:
        return np.ones(num_classes, dtype)
    w = np.asarray(getattr(weight, "data", weight), dtype)
    if w.shape != (num_classes,):
        raise ValueError(f"{op}: weight has shape {w.shape}, expected ({num_classes},) "
                         "(one per class)")
    return w


def cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """Softmax cross entropy of (N, C) or (N, C, d1, ...) logits and integer targets.

    PyTorch's semantics: per element `w[t] * -log p[t]`, mixed with label smoothing as
    `(1 - eps) * nll + eps / C * sum_c(w[c] * -log p[c])`; elements whose target is
    `ignore_index` contribute 0; "mean" divides by the sum of `w[t]` over the kept
    elements (their count without weights).
    """
    op = "cross_entropy"
    logits = _float_input(logits, op, "logits")
    if logits.ndim < 2:
        raise ValueError(f"{op}: logits must be (N, C) or (N, C, d1, ...), got shape "
                         f"{logits.shape}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    t = _check_ce_target(logits, target, op)
    num_classes = logits.shape[1]
    keep = t != ignore_index
    bad = keep & ((t < 0) | (t >= num_classes))
    if bad.any():
        raise IndexError(f"{op}: target holds class index {int(t[bad][0])} outside [0, "
                         f"{num_classes}) for logits of shape {logits.shape} "
                         f"(ignore_index={ignore_index})")
    safe = np.where(keep, t, 0)
    w = _class_weights(weight, num_classes, logits.dtype, op)
    w_t = w[safe] * keep                                          # (N, d1, ...)
    logp = log_softmax(logits, axis=1)                            # (N, C, d1, ...)
    picked = M.squeeze(M.gather(logp, 1, Tensor(safe[:, None])), 1)
    loss = picked * Tensor(-w_t)
    if label_smoothing > 0:
        w_c = w.reshape((1, num_classes) + (1,) * (logits.ndim - 2))
        smooth = M.sum(logp * Tensor(w_c), axis=1) * Tensor(-keep.astype(logits.dtype))
        loss = loss * (1.0 - label_smoothing) + smooth * (label_smoothing / num_classes)
    if reduction == "none":
        return loss
    total = M.sum(loss)
    return total / Tensor(np.asarray(w_t.sum(), logits.dtype)) if reduction == "mean" else total


def binary_cross_entropy_with_logits(logits, target, weight=None, pos_weight=None,
                                     reduction="mean"):
    """-[p * t * log s(x) + (1 - t) * log(1 - s(x))] * weight, with p = pos_weight.

    Stable form: (1 - t) * x + (1 + (p - 1) * t) * softplus(-x); softplus never overflows.
    `pos_weight` broadcasts along the last (class) axis, `weight` against the logits.
    """
    op = "binary_cross_entropy_with_logits"
    logits = _float_input(logits, op, "logits")
    target = _same_shape(logits, target, op)
    softplus_neg = A.Softplus.apply(-logits, beta=1.0, threshold=None)   # -log s(x)
    if pos_weight is not None:
        pos_weight = _broadcastable(pos_weight, logits, op, "pos_weight")
        softplus_neg = softplus_neg * ((pos_weight - 1.0) * target + 1.0)
    loss = (1.0 - target) * logits + softplus_neg
    if weight is not None:
        loss = loss * _broadcastable(weight, logits, op, "weight")
    return _reduce(loss, reduction, op)


def _broadcastable(w, x, op, what):
    w = as_tensor(w)
    if not dtypes.is_floating(w.dtype):
        w = w.astype(x.dtype)
    try:
        if np.broadcast_shapes(w.shape, x.shape) != x.shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"{op}: {what} of shape {w.shape} does not broadcast to the "
                         f"input shape {x.shape}") from None
    return w


def sigmoid_focal_loss(logits, target, alpha=0.25, gamma=2.0, reduction="none"):
    """RetinaNet's focal loss (Lin et al. 2017, eq. 5): alpha_t * (1 - p_t)^gamma * CE.

    `target` is 0/1 (float) of the logits' shape; alpha < 0 turns the alpha weighting off.
    """
    op = "sigmoid_focal_loss"
    logits = _float_input(logits, op, "logits")
    target = _same_shape(logits, target, op)
    p = sigmoid(logits)
    ce = binary_cross_entropy_with_logits(logits, target, reduction="none")
    p_t = p * target + (1.0 - p) * (1.0 - target)
    loss = ce * (1.0 - p_t) ** gamma
    if alpha >= 0:
        loss = loss * (target * alpha + (1.0 - target) * (1.0 - alpha))
    return _reduce(loss, reduction, op)


# ---------------------------------------------------------------- regression

def smooth_l1_loss(x, y, beta=1.0, reduction="mean"):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (Fast R-CNN); beta=0 is L1."""
    op = "smooth_l1_loss"
    x = _float_input(x, op)
    y = _same_shape(x, y, op)
    if beta < 0:
        raise ValueError(f"{op}: beta must be >= 0, got {beta}")
    d = x - y
    ad = M.abs(d)
    if beta == 0:
        return _reduce(ad, reduction, op)
    loss = M.where(ad < beta, d * d * (0.5 / beta), ad - 0.5 * beta)
    return _reduce(loss, reduction, op)


def l1_loss(x, y, reduction="mean"):
    x = _float_input(x, "l1_loss")
    return _reduce(M.abs(x - _same_shape(x, y, "l1_loss")), reduction, "l1_loss")


def mse_loss(x, y, reduction="mean"):
    x = _float_input(x, "mse_loss")
    d = x - _same_shape(x, y, "mse_loss")
    return _reduce(d * d, reduction, "mse_loss")
