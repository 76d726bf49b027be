"""In-place initialisers with PyTorch's formulas, drawing from tianyuan.random.rng().

Each writes into `tensor.data` outside the graph, keeps its dtype, and returns the tensor.

>>> import tianyuan as ty
>>> from tianyuan.nn import init
>>> w = init.kaiming_normal_(ty.zeros(64, 32, 3, 3), mode="fan_out", nonlinearity="relu")
"""
import math

import numpy as np

from ..random import rng


def _fill(tensor, values):
    tensor.data[...] = np.asarray(values).astype(tensor.dtype, copy=False)
    return tensor


def calculate_fan_in_and_fan_out(tensor):
    """fan_in = shape[1] * receptive field, fan_out = shape[0] * receptive field."""
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise ValueError(f"calculate_fan_in_and_fan_out: needs a tensor with at least 2 dims, "
                         f"got shape {shape}")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity, param=None):
    """The std gain that keeps activations' variance for `nonlinearity` (PyTorch's table)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _fan(tensor, mode, op):
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    if mode == "fan_in":
        return fan_in
    if mode == "fan_out":
        return fan_out
    raise ValueError(f"{op}: mode must be 'fan_in' or 'fan_out', got {mode!r}")


def uniform_(tensor, a=0.0, b=1.0):
    return _fill(tensor, rng().uniform(a, b, tensor.shape))


def normal_(tensor, mean=0.0, std=1.0):
    return _fill(tensor, rng().normal(mean, std, tensor.shape))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """Normal(mean, std) redrawn until inside [a, b] (absolute bounds, as PyTorch's)."""
    values = rng().normal(mean, std, tensor.shape)
    bad = (values < a) | (values > b)
    while bad.any():
        values[bad] = rng().normal(mean, std, int(bad.sum()))
        bad = (values < a) | (values > b)
    return _fill(tensor, values)


def constant_(tensor, value):
    return _fill(tensor, np.full(tensor.shape, value))


def zeros_(tensor):
    return constant_(tensor, 0)


def ones_(tensor):
    return constant_(tensor, 1)


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    """U(-bound, bound), bound = gain * sqrt(3 / fan) (He et al. 2015)."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode, "kaiming_uniform_"))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    """N(0, std^2), std = gain / sqrt(fan) (He et al. 2015)."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode, "kaiming_normal_"))
    return normal_(tensor, 0.0, std)


def xavier_uniform_(tensor, gain=1.0):
    """U(-bound, bound), bound = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010)."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0):
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))
