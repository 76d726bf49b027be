"""Pooling primitives, vectorised numpy: loops run over kernel offsets, never over pixels.

Each window offset (i, j) is one strided view (N, C, out_h, out_w) of the padded input.
Arguments arrive normalised by tianyuan.functional.pooling: pairs, and the output size
(which already reflects ceil_mode); the bottom/right padding needed for the last window
is derived here.
"""
import numpy as np

from ..autograd import Function


def _padded(x, kernel, stride, padding, dilation, out_size, value):
    """x padded so every window fits: (pt, pb) with pb >= what the last window reaches."""
    pads = []
    for size, k, s, p, d, o in zip(x.shape[2:], kernel, stride, padding, dilation, out_size):
        pads.append((p, max(0, (o - 1) * s + d * (k - 1) + 1 - size - p)))
    return np.pad(x, ((0, 0), (0, 0)) + tuple(pads), constant_values=value), pads


def _window(xp, i, j, stride, dilation, out_size):
    """View (N, C, out_h, out_w) of padded xp at kernel offset (i, j)."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_size
    y0, x0 = i * dh, j * dw
    return xp[:, :, y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw]


def _crop(xp, pads, shape):
    return xp[:, :, pads[0][0]:pads[0][0] + shape[2], pads[1][0]:pads[1][0] + shape[3]]


class MaxPool2d(Function):
    """Max over each window; the gradient goes to the (first) argmax. NaN wins, as in PyTorch."""

    def forward(self, x, kernel=(1, 1), stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                out_size=(1, 1)):
        self.shape, self.args = x.shape, (kernel, stride, padding, dilation, out_size)
        xp, self.pads = _padded(x, kernel, stride, padding, dilation, out_size, -np.inf)
        out = _window(xp, 0, 0, stride, dilation, out_size).copy()
        self.argmax = np.zeros(out.shape, np.int32)  # kernel offset i * kw + j of the max
        better = np.empty(out.shape, bool)
        for k in range(1, kernel[0] * kernel[1]):
            view = _window(xp, k // kernel[1], k % kernel[1], stride, dilation, out_size)
            np.greater(view, out, out=better)
            better |= np.isnan(view)
            np.copyto(out, view, where=better)
            np.copyto(self.argmax, k, where=better)
        return out

    def backward(self, g):
        kernel, stride, padding, dilation, out_size = self.args
        gp = np.zeros((g.shape[0], g.shape[1]) + tuple(
            s + lo + hi for s, (lo, hi) in zip(self.shape[2:], self.pads)), g.dtype)
        for k in range(kernel[0] * kernel[1]):
            view = _window(gp, k // kernel[1], k % kernel[1], stride, dilation, out_size)
            view += np.where(self.argmax == k, g, 0)  # one offset never hits a pixel twice
        return _crop(gp, self.pads, self.shape)


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
        xp, self.pads = _padded(x, kernel, stride, padding, (1, 1), out_size, 0)
        counts = [avg_pool_counts(n, k, s, p, o, count_include_pad)
                  for n, k, s, p, o in zip(x.shape[2:], kernel, stride, padding, out_size)]
        self.divisor = np.outer(counts[0], counts[1]).astype(x.dtype)  # (out_h, out_w)
        out = np.zeros(x.shape[:2] + tuple(out_size), x.dtype)
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                out += _window(xp, i, j, stride, (1, 1), out_size)
        return out / self.divisor

    def backward(self, g):
        kernel, stride, dilation, out_size = self.args
        gd = g / self.divisor
        gp = np.zeros((g.shape[0], g.shape[1]) + tuple(
            s + lo + hi for s, (lo, hi) in zip(self.shape[2:], self.pads)), g.dtype)
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                _window(gp, i, j, stride, dilation, out_size)[...] += gd
        return _crop(gp, self.pads, self.shape)


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
