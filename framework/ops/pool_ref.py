"""Numpy twins of the pooling kernels (framework/csrc/pool/pool.cpp) and their window helpers.
Loops run over kernel offsets, never over pixels.

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


def avg_pool_counts(size, k, s, p, out, count_include_pad):
    """Divisor per output index along one axis (PyTorch's rule: windows clipped to the
    padded input for count_include_pad, to the real input otherwise)."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    if count_include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def _avg_divisor(shape, kernel, stride, padding, out_size, count_include_pad, dtype):
    counts = [avg_pool_counts(n, k, s, p, o, count_include_pad)
              for n, k, s, p, o in zip(shape[2:], kernel, stride, padding, out_size)]
    return np.outer(counts[0], counts[1]).astype(dtype)  # (out_h, out_w)


def avg_pool2d_ref(x, kernel, stride, padding, out_size, count_include_pad):
    """Window means (N, C, out_h, out_w); padding (top, left), zeros."""
    xp, _ = padded(x, kernel, stride, padding, (1, 1), out_size, 0)
    out = np.zeros(x.shape[:2] + tuple(out_size), x.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            out += window(xp, i, j, stride, (1, 1), out_size)
    return out / _avg_divisor(x.shape, kernel, stride, padding, out_size, count_include_pad,
                              x.dtype)


def avg_pool2d_backward_ref(grad, input_shape, kernel, stride, padding, count_include_pad):
    """Each output gradient spread over its window -> (N, C, H, W)."""
    out_size = grad.shape[2:]
    gd = grad / _avg_divisor(input_shape, kernel, stride, padding, out_size, count_include_pad,
                             grad.dtype)
    gp, pads = padded(np.zeros(input_shape, grad.dtype), kernel, stride, padding, (1, 1),
                      out_size, 0)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            window(gp, i, j, stride, (1, 1), out_size)[...] += gd
    return crop(gp, pads, input_shape)


def adaptive_pool_matrix(size, out, dtype):
    """(out, size) averaging matrix: row i covers [floor(i*size/out), ceil((i+1)*size/out))."""
    i = np.arange(out)
    start = (i * size) // out
    end = -((-(i + 1) * size) // out)
    cols = np.arange(size)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


def adaptive_avg_pool2d_ref(x, out_size):
    """A_h @ x @ A_w^T with (out, in) averaging matrices (the mean over a rectangle is
    separable)."""
    ah = adaptive_pool_matrix(x.shape[2], out_size[0], x.dtype)
    aw = adaptive_pool_matrix(x.shape[3], out_size[1], x.dtype)
    return np.matmul(np.matmul(ah, x), aw.T)


def adaptive_avg_pool2d_backward_ref(grad, input_shape):
    ah = adaptive_pool_matrix(input_shape[2], grad.shape[2], grad.dtype)
    aw = adaptive_pool_matrix(input_shape[3], grad.shape[3], grad.dtype)
    return np.matmul(np.matmul(ah.T, grad), aw)
