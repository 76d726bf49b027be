"""Pooling primitives.

Max pooling is native (framework/csrc/pool.cpp). Average pooling is numpy: one strided
view (N, C, out_h, out_w) of the padded input per kernel offset (helpers in pool_ref.py),
never a loop over pixels. Arguments arrive normalised by tianyuan.functional.pooling: pairs,
and the output size (which already reflects ceil_mode); the bottom/right padding the last
window needs is derived from it.
"""
import numpy as np

from .. import _C
from ..autograd import Function
from .pool_ref import crop, padded, window


class MaxPool2d(Function):
    """Max over each window (native kernel, numpy twin pool_ref.max_pool2d_ref); the gradient
    goes to the first argmax. NaN propagates, as in PyTorch."""

    def forward(self, x, kernel=(1, 1), stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                out_size=(1, 1)):
        self.shape = x.shape
        out, self.argmax = _C.max_pool2d(x, kernel, stride, padding, dilation, out_size)
        return out

    def backward(self, g):
        return _C.max_pool2d_backward(g, self.argmax, self.shape)


def avg_pool_counts(size, k, s, p, out, count_include_pad):
    """Divisor per output index along one axis (PyTorch's rule: windows clipped to the
    padded input for count_include_pad, to the real input otherwise)."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    if count_include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


class AvgPool2d(Function):
    def forward(self, x, kernel=(1, 1), stride=(1, 1), padding=(0, 0), out_size=(1, 1),
                count_include_pad=True):
        self.shape, self.args = x.shape, (kernel, stride, (1, 1), out_size)
        xp, self.pads = padded(x, kernel, stride, padding, (1, 1), out_size, 0)
        counts = [avg_pool_counts(n, k, s, p, o, count_include_pad)
                  for n, k, s, p, o in zip(x.shape[2:], kernel, stride, padding, out_size)]
        self.divisor = np.outer(counts[0], counts[1]).astype(x.dtype)  # (out_h, out_w)
        out = np.zeros(x.shape[:2] + tuple(out_size), x.dtype)
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                out += window(xp, i, j, stride, (1, 1), out_size)
        return out / self.divisor

    def backward(self, g):
        kernel, stride, dilation, out_size = self.args
        gd = g / self.divisor
        gp = np.zeros((g.shape[0], g.shape[1]) + tuple(
            s + lo + hi for s, (lo, hi) in zip(self.shape[2:], self.pads)), g.dtype)
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                window(gp, i, j, stride, dilation, out_size)[...] += gd
        return crop(gp, self.pads, self.shape)


def adaptive_pool_matrix(size, out, dtype):
    """(out, size) averaging matrix: row i covers [floor(i*size/out), ceil((i+1)*size/out))."""
    i = np.arange(out)
    start = (i * size) // out
    end = -((-(i + 1) * size) // out)
    cols = np.arange(size)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


class AdaptiveAvgPool2d(Function):
    """Mean over PyTorch's adaptive windows. The mean over a rectangle is separable, so the
    op is A_h @ x @ A_w^T with (out, in) averaging matrices; backward is the transpose."""

    def forward(self, x, out_size=(1, 1)):
        self.ah = adaptive_pool_matrix(x.shape[2], out_size[0], x.dtype)  # (oh, H)
        self.aw = adaptive_pool_matrix(x.shape[3], out_size[1], x.dtype)  # (ow, W)
        return np.matmul(np.matmul(self.ah, x), self.aw.T)

    def backward(self, g):
        return np.matmul(np.matmul(self.ah.T, g), self.aw)
