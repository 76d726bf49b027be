"""Matrix product with numpy's batching rules (1-D operands promoted and squeezed); small
products run numpy's OpenBLAS on the calling thread (blas.small_product)."""
import numpy as np

from ..autograd import Function
from .blas import small_product
from .elementwise import unbroadcast


def _flops(a, b):
    """2 * the multiply-adds of a @ b (batch dimensions broadcast)."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if a.ndim > 1 and b.ndim > 1 else ()
    m = a.shape[-2] if a.ndim > 1 else 1
    n = b.shape[-1] if b.ndim > 1 else 1
    return 2 * int(np.prod(batch)) * m * n * a.shape[-1]


class Matmul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        with small_product(_flops(a, b)):
            return np.asarray(np.matmul(a, b))  # 1-D @ 1-D: a 0-d array, not a numpy scalar

    def backward(self, g):
        a, b = self.a, self.b
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        if b.ndim == 1:  # first: a 1-D @ 1-D product's gradient is 0-d
            g = np.expand_dims(g, -1)
        if a.ndim == 1:
            g = np.expand_dims(g, -2)
        with small_product(_flops(a, b)):  # each gradient costs what the product did
            return self._grads(a, b, a2, b2, g)

    def _grads(self, a, b, a2, b2, g):
        ga = gb = None
        if self.needs_input_grad[0]:
            ga = np.matmul(g, np.swapaxes(b2, -1, -2))
            ga = unbroadcast(ga, a2.shape).reshape(a.shape)
        if self.needs_input_grad[1]:
            gb = np.matmul(np.swapaxes(a2, -1, -2), g)
            gb = unbroadcast(gb, b2.shape).reshape(b.shape)
        return ga, gb
