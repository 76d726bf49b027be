"""Winograd F(2x2, 3x3) convolution: native tile transforms (framework/csrc/winograd/winograd.cpp)
around one batched numpy GEMM over the 16 tile positions. Numpy twins: conv_ref.winograd_*.

Applies to 3x3 kernels, stride 1, dilation 1, groups 1, padding <= 2 on every side (the
input gradient is then the same algorithm on the flipped, transposed weights).
"""
import numpy as np

from .. import _C

BUDGET = 64 << 20  # bytes of transformed input + products per batch chunk


def applies(w, groups, geo):
    return (w.shape[2:] == (3, 3) and geo.stride == (1, 1) and geo.dilation == (1, 1)
            and groups == 1 and max(geo.padding) <= 2)


def conv2d(x, w, padding):
    """x (N, C, H, W), w (Co, C, 3, 3), padding (t, b, l, r) -> (N, Co, oh, ow)."""
    n, c, h, wd = x.shape
    co = w.shape[0]
    pt, pb, pl, pr = padding
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    u = _C.winograd_weight_transform(w)  # (16, Co, C)
    per_image = 16 * (c + co) * ((oh + 1) // 2) * ((ow + 1) // 2) * x.itemsize
    step = max(1, BUDGET // per_image)
    out = np.empty((n, co, oh, ow), x.dtype)
    for s in range(0, n, step):
        xs = x[s:s + step]
        v = _C.winograd_input_transform(xs, (pt, pl), (oh, ow))  # (16, C, T)
        out[s:s + step] = _C.winograd_output_transform(np.matmul(u, v), xs.shape[0], (oh, ow))
    return out


def conv2d_input_grad(g, w, padding):
    """Input gradient of conv2d(x, w, padding): the same convolution of g with the flipped,
    transposed weights and padding 2 - p."""
    flipped = _C.conv_flip_kernel(w)
    return conv2d(np.ascontiguousarray(g), flipped, tuple(2 - p for p in padding))
