"""Normalisation primitives on the native batch-norm kernels (framework/csrc/norm/batch_norm.cpp).

Shapes: x (N, C, ...) with S values per (n, c) plane; per-channel vectors (C,).
The numpy twin is the composed batch norm (tianyuan.functional.normalization.
batch_norm_composed), built from primitives; tests compare the two, forward and backward.
"""
import numpy as np

from .. import _C
from ..autograd import Function


def channel_view(v, ndim):
    """(C,) -> (1, C, 1, ...) for broadcasting against an ndim-D (N, C, ...) array."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def batch_stats(x, extremes=False):
    """mean (C,), biased variance (C,) of x (N, C, ...) in one native pass; with extremes,
    each channel's min and max too, as (1, C, 2)."""
    return _C.batch_norm_stats(np.ascontiguousarray(x), extremes)


def fold_eval_f32(running_mean, running_var, weight, bias, eps, conv_bias):
    """(scale, shift) of eval_affine_arrays followed by shift + scale * conv_bias, in one
    native call with the same bits, where every argument is a float32 (C,) array or None
    (weight, bias, conv_bias); otherwise None."""
    return _C.bn_fold(running_mean, running_var, weight, bias, float(eps), conv_bias)


class BatchNormTrain(Function):
    """y = (x - mean) * invstd * weight + bias with the batch's mean and invstd (given, from
    batch_stats); the gradient flows through the statistics (one native pass per channel).
    clamp = (lo, hi): the ReLU / ReLU6 after it in the same passes (batch_norm.h's BnClamp),
    the same bits as the two ops one after the other. ste: fn(y) -> (out, mask), a
    straight-through estimator after that (elementwise.StraightThrough's fn) as the node's last
    step, its mask applied in the backward's passes (the same bits as the separate node).
    extremes: (1, C, 2), each channel's min and max of x (batch_stats'), given where ste is
    `by_range` (a fake quantization per tensor, quantization.fake_quant.ObservedFakeQuant's):
    y's range follows from them (the affine and the clamp are monotone per channel), and the
    affine pass writes the fake-quantized y and the mask in place of y, two passes fewer."""

    def forward(self, x, weight, bias, mean=None, invstd=None, clamp=None, ste=None,
                extremes=None):
        self.x, self.weight, self.mean, self.invstd = x, weight, mean, invstd
        scale = (invstd * weight).astype(x.dtype)
        shift = (bias - mean * scale).astype(x.dtype)
        # the backward's clamp mask comes from x and this affine, as the forward's values
        self.clamp, self.affine = (clamp, (scale, shift)) if clamp is not None else (None, None)
        self.mask = None
        if extremes is not None:  # y at each channel's min and max: y's min and max among them
            params = ste.from_range(*_C.min_max(_C.batch_norm_affine(extremes, scale, shift,
                                                                      clamp)))
            y, self.mask = _C.batch_norm_affine(x, scale, shift, clamp, params)
            return y
        y = _C.batch_norm_affine(x, scale, shift, clamp)
        if ste is not None:
            y, self.mask = ste(y)
        return y

    def backward(self, g):
        gx, gw, gb = _C.batch_norm_backward(np.ascontiguousarray(g, self.x.dtype), self.x,
                                            self.mean, self.invstd, self.weight,
                                            self.needs_input_grad[0], self.clamp, self.affine,
                                            self.mask)
        return gx, gw, gb


class ScaledBatchNormTrain(BatchNormTrain):
    """BatchNormTrain of x * scale[c] (scale (C,), a differentiable input) without the
    product: given x's own mean and invstd = scale / sqrt(scale^2 var(x) + eps), which
    normalise x * scale the same way (up to rounding). The normalised value does not depend on
    scale but through eps, so its gradient is sum(g * xhat) * weight * eps * invstd_z^2 / scale
    per channel (invstd_z = 1 / sqrt(scale^2 var(x) + eps)): the weight's gradient times
    `coef`, the rest of that factor, which the caller computes with the statistics. QAT's
    ConvBn (the conv output / f, then the batch norm) in the batch norm's passes."""

    def forward(self, x, weight, bias, scale, mean=None, invstd=None, coef=None, clamp=None,
                ste=None, extremes=None):
        self.coef = coef
        return super().forward(x, weight, bias, mean, invstd, clamp, ste, extremes)

    def backward(self, g):
        gx, gw, gb = super().backward(g)
        return gx, gw, gb, (gw * self.coef).astype(self.coef.dtype)


class ChannelAffine(Function):
    """y = x * scale[c] + shift[c] (eval-mode batch norm once its statistics are folded; QAT's
    conv output rescaled per channel). The backward runs on the batch-norm kernels, in
    parallel: gx = g * scale[c] is the affine pass, sum g * x and sum g per channel the
    training gradient's sums with mean 0 and invstd 1, not numpy's passes (bench/RESULTS.md,
    training: quantization-aware training)."""

    def forward(self, x, scale, shift):
        self.x, self.scale = x, scale
        return _C.batch_norm_affine(x, scale, shift)

    def backward(self, g):
        x = self.x
        g = np.ascontiguousarray(g, x.dtype)
        zeros = np.zeros(x.shape[1], x.dtype)
        gx = _C.batch_norm_affine(g, self.scale.astype(x.dtype), zeros) \
            if self.needs_input_grad[0] else None
        gs = gb = None
        if self.needs_input_grad[1] or self.needs_input_grad[2]:
            _, gs, gb = _C.batch_norm_backward(g, x, zeros, np.ones_like(zeros), None, False)
        return (gx, gs.astype(self.scale.dtype) if self.needs_input_grad[1] else None,
                gb if self.needs_input_grad[2] else None)


class SyncBatchNormTrain(Function):
    """Training batch norm over (N, C, H, W) with the statistics of the whole batch over the
    data-parallel processes (tianyuan.distributed): per channel, the sums of x and x^2 and the
    count are allreduced (float64); the backward allreduces the sums of g and g * xhat, so x's
    gradient is that of the processes' summed losses (PyTorch SyncBatchNorm's), and the weight
    and bias gradients stay this process's (the trainer's gradient average takes them).
    Running statistics (given arrays, updated in place): momentum, the unbiased variance."""

    def forward(self, x, weight, bias, running_mean=None, running_var=None, momentum=0.1,
                eps=1e-5):
        from .. import distributed
        c = x.shape[1]
        axes = (0,) + tuple(range(2, x.ndim))
        sums = np.concatenate([x.sum(axes, dtype=np.float64),
                               np.square(x).sum(axes, dtype=np.float64),
                               [x.size // c]])
        distributed.all_reduce(sums)
        n = sums[-1]
        mean = sums[:c] / n
        var = np.maximum(sums[c:2 * c] / n - mean * mean, 0.0)
        invstd = 1.0 / np.sqrt(var + eps)
        if running_mean is not None:
            running_mean *= 1.0 - momentum
            running_mean += (momentum * mean).astype(running_mean.dtype)
            running_var *= 1.0 - momentum
            running_var += (momentum * var * n / max(n - 1.0, 1.0)).astype(running_var.dtype)
        dtype = x.dtype
        self.n, self.axes = n, axes
        self.xhat = (x - channel_view(mean.astype(dtype), x.ndim)) * \
            channel_view(invstd.astype(dtype), x.ndim)
        self.scale = (weight.astype(np.float64) * invstd).astype(dtype)
        return self.xhat * channel_view(weight, x.ndim) + channel_view(bias, x.ndim)

    def backward(self, g):
        from .. import distributed
        sum_g = g.sum(self.axes, dtype=np.float64)
        sum_gx = (g * self.xhat).sum(self.axes, dtype=np.float64)
        totals = distributed.all_reduce(np.concatenate([sum_g, sum_gx]))
        c = sum_g.size
        mean_g = (totals[:c] / self.n).astype(g.dtype)
        mean_gx = (totals[c:] / self.n).astype(g.dtype)
        ndim = g.ndim
        gx = channel_view(self.scale, ndim) * (
            g - channel_view(mean_g, ndim) - self.xhat * channel_view(mean_gx, ndim))
        # the weight's and bias's gradients: this process's sums (the trainer averages them)
        return gx, sum_gx.astype(g.dtype), sum_g.astype(g.dtype)
