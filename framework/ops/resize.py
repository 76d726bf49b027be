"""Resampling primitive for interpolate: a sparse linear map along one axis.

out[..., o, ...] = sum_t weight[t, o] * x[..., index[t, o], ...]   (t over 1 or 2 taps)
`index` rows are non-decreasing (interpolation sources are monotone), so the backward
scatter-add is a segmented sum (np.add.reduceat) rather than a slow np.add.at.
Source-index rules (PyTorch's) live in `nearest_taps` and `linear_taps`.
"""
import numpy as np

from ..autograd import Function


def nearest_taps(in_size, out_size, scale=None, exact=False):
    """Source index per output index. `scale` is the user's scale_factor (used as 1/scale)
    when given, else in/out; computed in float32 as PyTorch's CPU kernel does."""
    step = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
    dst = np.arange(out_size, dtype=np.float32)
    if exact:  # 'nearest-exact': pixel centres
        dst = dst + np.float32(0.5)
    index = np.minimum(np.floor(dst * step).astype(np.int64), in_size - 1)
    return index[None], None


def linear_taps(in_size, out_size, align_corners, scale=None, dtype=np.float32):
    """Two source indices and weights per output index (PyTorch's area_pixel rules)."""
    dtype = np.dtype(dtype)
    if align_corners:
        step = dtype.type((in_size - 1) / (out_size - 1)) if out_size > 1 else dtype.type(0)
        src = np.arange(out_size, dtype=dtype) * step
    else:
        step = dtype.type(1.0 / scale) if scale else dtype.type(in_size) / dtype.type(out_size)
        src = (np.arange(out_size, dtype=dtype) + dtype.type(0.5)) * step - dtype.type(0.5)
        src = np.maximum(src, dtype.type(0))
    i0 = np.minimum(src.astype(np.int64), in_size - 1)
    i1 = i0 + (i0 < in_size - 1)
    l1 = np.clip(src - i0, 0, 1).astype(dtype)
    return np.stack([i0, i1]), np.stack([1 - l1, l1])


def _scatter_sum(g, index, size, axis):
    """Adjoint of np.take(., index, axis) for non-decreasing `index`."""
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    sums = np.add.reduceat(g, starts, axis=axis)
    shape = list(g.shape)
    shape[axis] = size
    out = np.zeros(shape, g.dtype)
    where = [slice(None)] * g.ndim
    where[axis] = index[starts]
    out[tuple(where)] = sums
    return out


class AxisResample(Function):
    def forward(self, x, index=None, weight=None, axis=2):
        self.index, self.weight, self.axis, self.size = index, weight, axis, x.shape[axis]
        if weight is None:
            return np.take(x, index[0], axis=axis)
        out = None
        for idx, w in zip(index, weight):
            term = np.take(x, idx, axis=axis) * self._along(w.astype(x.dtype), x.ndim)
            out = term if out is None else out + term
        return out

    def _along(self, w, ndim):
        shape = [1] * ndim
        shape[self.axis] = w.shape[0]
        return w.reshape(shape)

    def backward(self, g):
        if self.weight is None:
            return _scatter_sum(g, self.index[0], self.size, self.axis)
        grad = None
        for idx, w in zip(self.index, self.weight):
            term = _scatter_sum(g * self._along(w.astype(g.dtype), g.ndim), idx, self.size,
                                self.axis)
            grad = term if grad is None else grad + term
        return grad
