"""Pooling primitives, native (framework/csrc/pool/pool.cpp, generic / AVX2 / AVX-512 builds):
max with argmax, average, adaptive average, forward and backward. Arguments arrive
normalised by tianyuan.functional.pooling: pairs, and the output size (which already
reflects ceil_mode). Numpy twins: pool_ref.py.
"""
import numpy as np

from .. import _C
from ..autograd import Function, is_grad_enabled


class MaxPool2d(Function):
    """Max over each window (native kernel, numpy twin pool_ref.max_pool2d_ref); the gradient
    goes to the first argmax. NaN propagates, as in PyTorch. Without a backward to come (no
    grad, or an input that needs none) the values come from the separable kernel instead."""

    def forward(self, x, kernel=(1, 1), stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                out_size=(1, 1)):
        self.shape = x.shape
        if not (is_grad_enabled() and self.needs_input_grad[0]):  # no backward: no argmax
            return _C.max_pool2d_values(x, kernel, stride, padding, dilation, out_size)
        out, self.argmax = _C.max_pool2d(x, kernel, stride, padding, dilation, out_size)
        return out

    def backward(self, g):
        return _C.max_pool2d_backward(g, self.argmax, self.shape)


class AvgPool2d(Function):
    """Mean over each window (native kernel; numpy twin pool_ref.avg_pool2d_ref)."""

    def forward(self, x, kernel=(1, 1), stride=(1, 1), padding=(0, 0), out_size=(1, 1),
                count_include_pad=True):
        self.shape, self.args = x.shape, (kernel, stride, padding, count_include_pad)
        return _C.avg_pool2d(x, kernel, stride, padding, out_size, count_include_pad)

    def backward(self, g):
        return _C.avg_pool2d_backward(g, self.shape, *self.args)


class AdaptiveAvgPool2d(Function):
    """Mean over PyTorch's adaptive windows (native kernel; numpy twin
    pool_ref.adaptive_avg_pool2d_ref)."""

    def forward(self, x, out_size=(1, 1)):
        self.shape = x.shape
        return _C.adaptive_avg_pool2d(x, out_size)

    def backward(self, g):
        return _C.adaptive_avg_pool2d_backward(g, self.shape)


class AvgPool2dBackward(Function):
    """AvgPool2d's input gradient as an op of its own (g (N, C, oh, ow) -> (N, C, H, W)), so
    a gradient taken with create_graph is differentiable again: the op is linear in g, and its
    gradient is the average pool itself (the adjoint's adjoint)."""

    def forward(self, g, shape=None, args=None):
        self.out_size, self.args = g.shape[2:], args
        return _C.avg_pool2d_backward(np.ascontiguousarray(g), shape, *args)

    def backward(self, gg):
        kernel, stride, padding, count_include_pad = self.args
        return _C.avg_pool2d(np.ascontiguousarray(gg), kernel, stride, padding, self.out_size,
                             count_include_pad)


class AdaptiveAvgPool2dBackward(Function):
    """AdaptiveAvgPool2d's input gradient as an op (see AvgPool2dBackward)."""

    def forward(self, g, shape=None):
        self.out_size = g.shape[2:]
        return _C.adaptive_avg_pool2d_backward(np.ascontiguousarray(g), shape)

    def backward(self, gg):
        return _C.adaptive_avg_pool2d(np.ascontiguousarray(gg), self.out_size)
