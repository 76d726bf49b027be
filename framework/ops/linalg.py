"""Matrix product with numpy's batching rules (1-D operands promoted and squeezed)."""
import numpy as np

from ..autograd import Function
from .elementwise import unbroadcast


class Matmul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return np.matmul(a, b)

    def backward(self, g):
        a, b = self.a, self.b
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        if a.ndim == 1:
            g = np.expand_dims(g, -2)
        if b.ndim == 1:
            g = np.expand_dims(g, -1)
        ga = gb = None
        if self.needs_input_grad[0]:
            ga = np.matmul(g, np.swapaxes(b2, -1, -2))
            ga = unbroadcast(ga, a2.shape).reshape(a.shape)
        if self.needs_input_grad[1]:
            gb = np.matmul(np.swapaxes(a2, -1, -2), g)
            gb = unbroadcast(gb, b2.shape).reshape(b.shape)
        return ga, gb
