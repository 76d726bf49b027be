"""Casts between floating dtypes (gradient cast back)."""
from ..autograd import Function


class Cast(Function):
    def forward(self, x, dtype=None):
        self.dtype = x.dtype
        return x.astype(dtype)

    def backward(self, g):
        return g.astype(self.dtype)
