"""Activations, softmax and dropout: compositions of primitives (no backward of their own)
except softplus, whose primitive keeps it exact and overflow-free (ops/activation.py).

>>> import tianyuan as ty, tianyuan.functional as F
>>> F.softmax(ty.tensor([[1.0, 2.0, 3.0]]), axis=-1).sum().item()   # doctest: +ELLIPSIS
1.0...
"""
import numpy as np

from .. import dtypes
from ..ops import activation as A
from ..ops import elementwise as E
from ..random import rng
from ..tensor import Tensor, as_tensor
from . import math as M


def _floating(x, op):
    x = as_tensor(x)
    if not dtypes.is_floating(x.dtype):
        raise TypeError(f"{op}: expected a floating-point tensor, got dtype {x.dtype} "
                        f"(shape {x.shape})")
    return x


def _check_axis(x, axis, op):
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of shape {x.shape}")
    return axis % x.ndim


def relu(x):
    return E.Clamp.apply(_floating(x, "relu"), lo=0.0, hi=np.inf)


def relu6(x):
    return E.Clamp.apply(_floating(x, "relu6"), lo=0.0, hi=6.0)


def leaky_relu(x, negative_slope=0.01):
    x = _floating(x, "leaky_relu")
    return M.where(x > 0, x, x * negative_slope)


def sigmoid(x):
    return E.Sigmoid.apply(_floating(x, "sigmoid"))


def tanh(x):
    return E.Tanh.apply(_floating(x, "tanh"))


def hsigmoid(x):
    """Hard sigmoid relu6(x + 3) / 6 (MobileNetV3; PyTorch's hardsigmoid)."""
    return relu6(_floating(x, "hsigmoid") + 3.0) / 6.0


def hswish(x):
    """Hard swish x * relu6(x + 3) / 6 (MobileNetV3; PyTorch's hardswish)."""
    x = _floating(x, "hswish")
    return x * hsigmoid(x)


def softplus(x, beta=1.0, threshold=20.0):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (PyTorch's rule)."""
    if beta <= 0:
        raise ValueError(f"softplus: beta must be positive, got {beta}")
    return A.Softplus.apply(_floating(x, "softplus"), beta=float(beta), threshold=threshold)


def _shifted(x, axis, op):
    """x minus its (detached) max along `axis`, so exp never overflows."""
    x = _floating(x, op)
    axis = _check_axis(x, axis, op)
    if x.data.size == 0:
        raise ValueError(f"{op}: empty tensor of shape {x.shape}")
    return x - Tensor(x.data.max(axis=axis, keepdims=True)), axis


def softmax(x, axis=-1):
    shifted, axis = _shifted(x, axis, "softmax")
    e = M.exp(shifted)
    return e / M.sum(e, axis, keepdims=True)


def log_softmax(x, axis=-1):
    shifted, axis = _shifted(x, axis, "log_softmax")
    return shifted - M.log(M.sum(M.exp(shifted), axis, keepdims=True))


def dropout(x, p=0.5, training=True):
    """Zero each element with probability p and scale survivors by 1 / (1 - p).

    The mask comes from tianyuan.random.rng(), so `manual_seed` makes it repeatable.
    """
    x = _floating(x, "dropout")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * Tensor(np.zeros(x.shape, x.dtype))
    keep = rng().random(x.shape) >= p
    scale = np.asarray(1.0 / (1.0 - p), x.dtype)
    return x * Tensor((keep * scale).astype(x.dtype))
