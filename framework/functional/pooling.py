"""Pooling: argument checks and output sizes (PyTorch's rules), then the pool primitives.

>>> import tianyuan as ty, tianyuan.functional as F
>>> F.max_pool2d(ty.randn(1, 3, 7, 7), 2, ceil_mode=True).shape
(1, 3, 4, 4)
"""
from ..ops import pool as P
from ._args import image_tensor, pair, same_grid


def pool_out_size(size, k, s, p, d, ceil_mode):
    """PyTorch's pooling output size; in ceil_mode the last window must start inside the
    input or its left padding."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_geometry(x, op, kernel_size, stride, padding, dilation, ceil_mode):
    kernel = pair(kernel_size, "kernel_size", op, 1)
    stride = kernel if stride is None or stride == () else pair(stride, "stride", op, 1)
    padding = pair(padding, "padding", op)
    dilation = pair(dilation, "dilation", op, 1)
    for k, p, d in zip(kernel, padding, dilation):
        if p > (d * (k - 1) + 1) // 2:
            raise ValueError(f"{op}: padding {padding} must be at most half of the (dilated) "
                             f"kernel size {kernel} (dilation {dilation})")
    out = tuple(pool_out_size(n, k, s, p, d, ceil_mode)
                for n, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation))
    if min(out) < 1:
        raise ValueError(f"{op}: output size {out} is too small: input {x.shape}, kernel "
                         f"{kernel}, stride {stride}, padding {padding}, dilation {dilation}")
    return kernel, stride, padding, dilation, out


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over (dilated) windows; stride defaults to kernel_size; padding counts as -inf."""
    op = "max_pool2d"
    image_tensor(x, op)
    kernel, stride, padding, dilation, out = _pool_geometry(
        x, op, kernel_size, stride, padding, dilation, ceil_mode)
    return same_grid(x, P.MaxPool2d.apply(x, kernel=kernel, stride=stride, padding=padding,
                                          dilation=dilation, out_size=out))


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Mean over windows; count_include_pad counts zero padding in the divisor (never the
    extra ceil_mode edge), as PyTorch does."""
    op = "avg_pool2d"
    image_tensor(x, op)
    kernel, stride, padding, _, out = _pool_geometry(
        x, op, kernel_size, stride, padding, 1, ceil_mode)
    return P.AvgPool2d.apply(x, kernel=kernel, stride=stride, padding=padding, out_size=out,
                             count_include_pad=bool(count_include_pad))


def adaptive_avg_pool2d(x, output_size):
    """Mean over windows [floor(i*H/oh), ceil((i+1)*H/oh)); output_size int, pair, or a pair
    with None for 'keep the input size'."""
    op = "adaptive_avg_pool2d"
    image_tensor(x, op)
    if isinstance(output_size, (tuple, list)) and len(output_size) == 2:
        output_size = tuple(n if o is None else o for o, n in zip(output_size, x.shape[2:]))
    out = pair(output_size, "output_size", op, 1)
    if min(x.shape[2:]) < 1:
        raise ValueError(f"{op}: input must have a non-empty image, got shape {x.shape}")
    return P.AdaptiveAvgPool2d.apply(x, out_size=out)
