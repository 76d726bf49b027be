"""Reductions. Mean and var are compositions in functional; these are the primitives."""
import numpy as np

from ..autograd import Function


def _expand_back(g, shape, axis, keepdims):
    if axis is not None and not keepdims:
        g = np.expand_dims(g, axis)
    return np.broadcast_to(g, shape)


class Sum(Function):
    def forward(self, x, axis=None, keepdims=False):
        self.shape, self.axis, self.keepdims = x.shape, axis, keepdims
        return np.asarray(x.sum(axis=axis, keepdims=keepdims))

    def backward(self, g):
        return np.array(_expand_back(g, self.shape, self.axis, self.keepdims))


class Max(Function):
    """Gradient goes to the maxima, split evenly among ties."""

    def forward(self, x, axis=None, keepdims=False):
        self.x, self.axis, self.keepdims = x, axis, keepdims
        self.out = np.asarray(x.max(axis=axis, keepdims=True))
        return self.out if keepdims else np.asarray(self.out.squeeze(axis=axis))

    def backward(self, g):
        mask = self.x == self.out
        count = mask.sum(axis=self.axis, keepdims=True)
        g = g if self.keepdims or self.axis is None else np.expand_dims(g, self.axis)
        return (mask * (g / count)).astype(self.x.dtype, copy=False)
