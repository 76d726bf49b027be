"""Batch norm and linear.

`batch_norm` runs the native kernels (tianyuan.ops.norm: batch statistics, normalisation
and the gradient through the statistics, one pass per channel each).
`batch_norm_composed` is the same math composed from primitives (its gradient flows through
the statistics because they are built from the same primitives): the numpy reference the
tests hold the native path to. Running statistics are updated in place on numpy (no graph).
"""
import numpy as np

from .. import dtypes
from ..ops import elementwise as E
from ..ops import norm as N
from ..tensor import Tensor, as_tensor
from . import math as M


def _channel_shape(x):
    """(1, C, 1, ...) so per-channel vectors broadcast against (N, C, ...)."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _check_vector(v, channels, op, what, x_shape):
    if v is None:
        return None
    if tuple(v.shape) != (channels,):
        raise ValueError(f"{op}: {what} has shape {tuple(v.shape)}, expected ({channels},) "
                         f"for input of shape {x_shape}")
    return v


def _update_running(stat, value, momentum):
    """stat <- (1 - momentum) * stat + momentum * value, in place, outside the graph."""
    data = stat.data if isinstance(stat, Tensor) else stat
    data *= 1.0 - momentum
    data += (momentum * value).astype(data.dtype, copy=False)


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5, clamp=None, input_scale=None, ste=None):
    """Normalise (N, C) or (N, C, H, W) per channel C.

    training: batch mean and biased variance normalise; running_var takes the unbiased
    variance (n / (n - 1), PyTorch's rule); running stats of None are left alone.
    eval: the running statistics normalise.
    clamp = (lo, hi): then clamp the result, a ReLU (0, inf) or ReLU6 (0, 6) after the batch
    norm; in training both run in the same native passes (`nn.Sequential` does this for a
    BatchNorm2d followed by ReLU / ReLU6), the same bits as `relu(batch_norm(...))`.
    input_scale (C,), a Tensor: normalise x * input_scale[c] instead, without forming the
    product (training: x's statistics, rescaled; ops.norm.ScaledBatchNormTrain), the same up
    to rounding, with its gradient. QAT's ConvBn2d divides its conv output by the folding
    factor this way.
    ste: fn(array) -> (array, mask), a straight-through estimator applied last
    (ops.elementwise.StraightThrough: the gradient passes where mask); in training its mask
    is applied in the batch norm's backward passes, the same bits as the separate node. QAT's
    ConvBn2d runs its activation's fake quantization this way; where ste is `by_range`
    (per tensor, ops.norm.BatchNormTrain), float32 training writes the fake-quantized output
    in the affine pass.
    """
    op = "batch_norm"
    x = _check_input(x, running_mean, running_var, weight, bias, op)
    _check_vector(input_scale, x.shape[1], op, "input_scale", x.shape)
    channels = x.shape[1]
    if not training:
        scale, shift = _eval_affine(x, running_mean, running_var, weight, bias, eps, op)
        if input_scale is not None:
            scale = scale * as_tensor(input_scale)
        y = N.ChannelAffine.apply(x, scale, shift)
        y = y if clamp is None else E.Clamp.apply(y, lo=clamp[0], hi=clamp[1])
        return y if ste is None else E.StraightThrough.apply(y, fn=ste)
    count = x.data.size // channels
    if count < 2:
        raise ValueError(f"{op}: training needs more than one value per channel, got input "
                         f"shape {x.shape}")
    bounds = None if clamp is None or x.dtype != np.float32 else tuple(map(float, clamp))
    separate = clamp is not None and bounds is None  # the native clamp's domain (clamp.h)
    inner = None if separate else ste
    # a fake quantization that takes its range per tensor: from the channels' extremes
    by_range = inner is not None and x.dtype == np.float32 and getattr(inner, "by_range", False)
    x_mean, var, *ends = N.batch_stats(x.data, by_range)
    mean = x_mean
    if input_scale is not None:  # the statistics of x * s
        input_scale = as_tensor(input_scale)
        s = input_scale.data.astype(np.float64)
        mean, var = x_mean * s, var * s * s
    if running_mean is not None:
        _update_running(running_mean, mean, momentum)
    if running_var is not None:
        _update_running(running_var, var * (count / (count - 1)), momentum)
    ones = Tensor(np.ones(channels, x.dtype))
    w = ones if weight is None else as_tensor(weight)
    b = Tensor(np.zeros(channels, x.dtype)) if bias is None else as_tensor(bias)
    invstd = 1.0 / np.sqrt(var.astype(np.float64) + eps)
    extremes = ends[0] if by_range else None
    if input_scale is None:
        y = N.BatchNormTrain.apply(x, w, b, mean=mean, invstd=invstd.astype(x.dtype),
                                   clamp=bounds, ste=inner, extremes=extremes)
    else:  # x's own mean; (x * s)'s invstd times s
        coef = (w.data * eps * invstd * invstd / s).astype(x.dtype)
        y = N.ScaledBatchNormTrain.apply(x, w, b, input_scale, mean=x_mean,
                                         invstd=(invstd * s).astype(x.dtype), coef=coef,
                                         clamp=bounds, ste=inner, extremes=extremes)
    if separate:
        y = E.Clamp.apply(y, lo=clamp[0], hi=clamp[1])
        return y if ste is None else E.StraightThrough.apply(y, fn=ste)
    return y


def _check_input(x, running_mean, running_var, weight, bias, op):
    x = as_tensor(x)
    if x.ndim < 2 or not dtypes.is_floating(x.dtype):
        raise ValueError(f"{op}: expected a floating (N, C) or (N, C, H, W) input, got shape "
                         f"{x.shape} and dtype {x.dtype}")
    for v, what in ((running_mean, "running_mean"), (running_var, "running_var"),
                    (weight, "weight"), (bias, "bias")):
        _check_vector(v, x.shape[1], op, what, x.shape)
    return x


def _eval_affine(x, running_mean, running_var, weight, bias, eps, op):
    """Eval mode's per-channel (scale, shift) tensors (C,): y = x * scale + shift."""
    if running_mean is None or running_var is None:
        raise ValueError(f"{op}: eval mode needs running_mean and running_var "
                         f"(input shape {x.shape})")
    inv = 1.0 / np.sqrt(np.asarray(running_var, np.float64) + eps)
    scale = Tensor(inv.astype(x.dtype))
    if weight is not None:
        scale = scale * as_tensor(weight)
    shift = -scale * Tensor(np.asarray(running_mean, x.dtype))
    if bias is not None:
        shift = shift + as_tensor(bias)
    return scale, shift


def eval_affine_arrays(dtype, running_mean, running_var, weight, bias, eps, conv_bias=None):
    """_eval_affine on numpy arrays (weight, bias arrays or None), no autograd: the same
    operations in the same order, so the same bits, for inference paths (frozen BN folded into
    a conv) where building Tensors cost more than the arithmetic. conv_bias: a bias added
    before the BN, moved through it (shift + scale * conv_bias). All float32: one native call
    (bench/RESULTS.md, fp32 kernels: the BN fold), the same bits again."""
    if dtype == np.float32:
        folded = N.fold_eval_f32(running_mean, running_var, weight, bias, eps, conv_bias)
        if folded is not None:
            return folded
    inv = 1.0 / np.sqrt(np.asarray(running_var, np.float64) + eps)
    scale = inv.astype(dtype)
    if weight is not None:
        scale = scale * weight
    shift = -scale * np.asarray(running_mean, dtype)
    if bias is not None:
        shift = shift + bias
    if conv_bias is not None:
        shift = shift + scale * conv_bias
    return scale, shift


def batch_norm_composed(x, running_mean, running_var, weight=None, bias=None, training=False,
                        momentum=0.1, eps=1e-5):
    """batch_norm composed from primitives: the reference the native path is tested against."""
    op = "batch_norm"
    x = as_tensor(x)
    if x.ndim < 2 or not dtypes.is_floating(x.dtype):
        raise ValueError(f"{op}: expected a floating (N, C) or (N, C, H, W) input, got shape "
                         f"{x.shape} and dtype {x.dtype}")
    channels = x.shape[1]
    for v, what in ((running_mean, "running_mean"), (running_var, "running_var"),
                    (weight, "weight"), (bias, "bias")):
        _check_vector(v, channels, op, what, x.shape)
    shape = _channel_shape(x)
    if training:
        centered, var = _batch_stats(x, running_mean, running_var, momentum, op)
        scale = M.pow(var + eps, -0.5)                                # (C,)
        if weight is not None:
            scale = scale * as_tensor(weight)
        y = centered * M.reshape(scale, shape)
        return y if bias is None else y + M.reshape(as_tensor(bias), shape)
    if running_mean is None or running_var is None:
        raise ValueError(f"{op}: eval mode needs running_mean and running_var "
                         f"(input shape {x.shape})")
    # eval folds everything into one per-channel scale and shift: y = x * scale + shift
    inv = 1.0 / np.sqrt(np.asarray(running_var, np.float64) + eps)
    scale = Tensor(inv.astype(x.dtype))
    if weight is not None:
        scale = scale * as_tensor(weight)
    shift = -scale * Tensor(np.asarray(running_mean, x.dtype))
    if bias is not None:
        shift = shift + as_tensor(bias)
    return x * M.reshape(scale, shape) + M.reshape(shift, shape)


def _batch_stats(x, running_mean, running_var, momentum, op):
    """x minus its batch mean, and the biased batch variance (C,); updates running stats."""
    axes = (0,) + tuple(range(2, x.ndim))
    count = x.data.size // x.shape[1]
    if count < 2:
        raise ValueError(f"{op}: training needs more than one value per channel, got input "
                         f"shape {x.shape}")
    mean = M.mean(x, axes)
    centered = x - M.reshape(mean, _channel_shape(x))
    var = M.mean(centered * centered, axes)
    if running_mean is not None:
        _update_running(running_mean, mean.data, momentum)
    if running_var is not None:
        _update_running(running_var, var.data * (count / (count - 1)), momentum)
    return centered, var


def linear(x, weight, bias=None):
    """x @ weight.T + bias, with weight (out_features, in_features); x is (..., in_features)."""
    x, weight = as_tensor(x), as_tensor(weight)
    if weight.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D (out, in), got shape {weight.shape}")
    if x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input shape {x.shape} does not end in in_features="
                         f"{weight.shape[1]} of weight shape {weight.shape}")
    y = M.matmul(x, M.transpose(weight))
    if bias is not None:
        bias = as_tensor(bias)
        if bias.shape != (weight.shape[0],):
            raise ValueError(f"linear: bias has shape {bias.shape}, expected "
                             f"({weight.shape[0]},) for weight shape {weight.shape}")
        y = y + bias
    return y
