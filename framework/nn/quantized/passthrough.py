"""Int8 layers that keep their input's scale and zero point: pooling, ReLU, ReLU6.

Built from the float module (`from_float`): they have no QAT twin, because on
fake-quantized values the float op already gives what the int8 op gives (max pooling and
ReLU stay on the grid; average pooling rounds to the nearest step, half up).
"""
import numpy as np

from ...quantization import kernels as K
from ...quantization.qarray import qarray_of, wrap
from .conv import relu6_max
from .module import QuantizedModule


def _same(q, values):
    return wrap(values, q.scale, q.zero_point)


class _FromFloat(QuantizedModule):
    keys = ()

    @classmethod
    def from_float(cls, module):
        m = cls()
        for key in cls.keys:
            setattr(m, key, getattr(module, key))
        return m

    @classmethod
    def from_qat(cls, module):
        return cls.from_float(module)

    def extra_repr(self):
        return ", ".join(f"{k}={getattr(self, k)}" for k in self.keys)


class MaxPool2d(_FromFloat):
    keys = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")

    def forward(self, x):
        q = qarray_of(x, "MaxPool2d")
        return _same(q, self.graph_step(x)(q))

    def graph_step(self, x):
        """For `jit.trace` (and forward): the pooling as a function of the input's array."""
        if self.ceil_mode or self.dilation not in (1, (1, 1)):
            raise ValueError("quantized MaxPool2d: ceil_mode and dilation are not supported")
        kernel, stride, padding = self.kernel_size, self.stride, self.padding
        return lambda a: K.max_pool2d(a, kernel, stride, padding)


class AvgPool2d(_FromFloat):
    keys = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad")

    def forward(self, x):
        q = qarray_of(x, "AvgPool2d")
        return _same(q, self.graph_step(x)(q))

    def graph_step(self, x):
        """For `jit.trace` (and forward): the pooling as a function of the input's array."""
        if self.ceil_mode:
            raise ValueError("quantized AvgPool2d: ceil_mode is not supported")
        zp, kernel, stride = qarray_of(x, "AvgPool2d").zero_point, self.kernel_size, self.stride
        padding, count_include_pad = self.padding, self.count_include_pad
        return lambda a: K.avg_pool2d(a, zp, kernel, stride, padding, count_include_pad)


class AdaptiveAvgPool2d(_FromFloat):
    """Output sizes must divide the input's (global pooling always does)."""
    keys = ("output_size",)

    def forward(self, x):
        q = qarray_of(x, "AdaptiveAvgPool2d")
        return _same(q, self.graph_step(x)(q))

    def graph_step(self, x):
        """For `jit.trace` (and forward): the pooling as a function of the input's array."""
        q = qarray_of(x, "AdaptiveAvgPool2d")
        size = self.output_size
        size = (size, size) if size is None or np.isscalar(size) else tuple(size)
        out = [d if o is None else int(o) for d, o in zip(q.shape[2:], size)]
        if any(d % o for d, o in zip(q.shape[2:], out)):
            raise ValueError(f"quantized AdaptiveAvgPool2d: output {out} must divide the input "
                             f"{q.shape[2:]}")
        kernel, zp = tuple(d // o for d, o in zip(q.shape[2:], out)), q.zero_point
        return lambda a: K.avg_pool2d(a, zp, kernel, kernel, 0)


class ReLU(_FromFloat):
    def forward(self, x):
        q = qarray_of(x, "ReLU")
        return _same(q, np.maximum(q.view(np.ndarray), q.dtype.type(q.zero_point)))


class ReLU6(_FromFloat):
    def forward(self, x):
        q = qarray_of(x, "ReLU6")
        top = relu6_max(q.scale, q.zero_point, q.dtype)
        return _same(q, np.clip(q.view(np.ndarray), q.zero_point, top).astype(q.dtype))


class Dropout(_FromFloat):
    """Inference: the identity (an int8 model only runs in eval mode)."""
    keys = ("p",)
    graph_alias = True  # jit.trace: returns its input itself

    def forward(self, x):
        return x
