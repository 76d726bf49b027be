"""Numpy twins of the pooling kernels (framework/csrc/pool.cpp) and the window helpers the
numpy pooling ops share. Loops run over kernel offsets, never over pixels.

Each window offset (i, j) is one strided view (N, C, out_h, out_w) of the padded input;
`padding` is (top, left) and the bottom/right padding is whatever the last window reaches.
"""
import numpy as np


def padded(x, kernel, stride, padding, dilation, out_size, value):
    """x padded so every window fits: per axis (lo, hi) with hi what the last window reaches."""
    pads = []
    for size, k, s, p, d, o in zip(x.shape[2:], kernel, stride, padding, dilation, out_size):
        pads.append((p, max(0, (o - 1) * s + d * (k - 1) + 1 - size - p)))
    return np.pad(x, ((0, 0), (0, 0)) + tuple(pads), constant_values=value), pads


def window(xp, i, j, stride, dilation, out_size):
    """View (N, C, out_h, out_w) of padded xp at kernel offset (i, j)."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_size
    y0, x0 = i * dh, j * dw
    return xp[:, :, y0:y0 + sh * (oh - 1) + 1:sh, x0:x0 + sw * (ow - 1) + 1:sw]


def crop(xp, pads, shape):
    """The (H, W) image inside padded xp."""
    return xp[:, :, pads[0][0]:pads[0][0] + shape[2], pads[1][0]:pads[1][0] + shape[3]]


def max_pool2d_ref(x, kernel, stride, padding, dilation, out_size):
    """-> (out, argmax): argmax is the flat index y * W + x in the (H, W) plane of the first
    maximum; any NaN replaces the current best (NaN propagates), as the native kernel does."""
    xp, _ = padded(x, kernel, stride, padding, dilation, out_size, -np.inf)
    out = window(xp, 0, 0, stride, dilation, out_size).copy()
    offset = np.zeros(out.shape, np.int64)  # kernel offset i * kw + j of the max
    for k in range(1, kernel[0] * kernel[1]):
        view = window(xp, k // kernel[1], k % kernel[1], stride, dilation, out_size)
        better = (view > out) | np.isnan(view)
        np.copyto(out, view, where=better)
        np.copyto(offset, k, where=better)
    oy = np.arange(out_size[0])[:, None] * stride[0] - padding[0]
    ox = np.arange(out_size[1])[None, :] * stride[1] - padding[1]
    rows = oy + (offset // kernel[1]) * dilation[0]
    cols = ox + (offset % kernel[1]) * dilation[1]
    return out, (rows * x.shape[3] + cols).astype(np.int32)


def max_pool2d_backward_ref(grad, argmax, input_shape):
    """Each output gradient added at its argmax -> (N, C, H, W)."""
    n, c, h, w = input_shape
    gx = np.zeros((n * c, h * w), grad.dtype)
    planes = np.repeat(np.arange(n * c), argmax[0, 0].size)
    np.add.at(gx, (planes, argmax.reshape(-1)), grad.reshape(-1))
    return gx.reshape(input_shape)
