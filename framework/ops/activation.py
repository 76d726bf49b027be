"""Activation primitives that a composition would make wasteful or imprecise.

Softplus is one: composed as log(1 + exp(x)) it loses every digit below x ~ -17 in
float32 and its exp overflows (and poisons the gradient with inf * 0) above x ~ 88.
"""
import numpy as np

from ..autograd import Function


def stable_sigmoid(x):
    """1 / (1 + exp(-x)) split by sign so exp never overflows."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


class Softplus(Function):
    """log(1 + exp(beta * x)) / beta; linear (x) where beta * x > threshold (None: never)."""

    def forward(self, x, beta=1.0, threshold=None):
        bx = x * x.dtype.type(beta)
        self.bx, self.beta = bx, beta
        out = np.logaddexp(np.zeros((), x.dtype), bx) / x.dtype.type(beta)
        out = out.astype(x.dtype, copy=False)
        self.linear = None
        if threshold is not None:
            self.linear = bx > threshold
            out = np.where(self.linear, x, out)
        return out

    def backward(self, g):
        slope = stable_sigmoid(self.bx)
        if self.linear is not None:
            slope = np.where(self.linear, np.ones((), slope.dtype), slope)
        return g * slope
