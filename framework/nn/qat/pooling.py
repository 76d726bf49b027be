"""QAT average pooling: the float average, corrected (straight through) to what the int8
kernel returns, so QAT simulates int8 exactly.

Int8 average pooling keeps the input's scale and rounds ``sum / count`` half up; the
float average of fake-quantized values lies between grid points. When the input carries
its quantization parameters (`x.qparams`, set by every fake-quantized QAT output), the
output is ``avg(x) + stop_gradient(int8_avg(x) - avg(x))``: the int8 value forward, the
average's gradient backward. Without them (fake quant off) it is the float average.
"""
import numpy as np

from ...quantization import kernels as K
from ...quantization import reference as R
from ...tensor import Tensor
from .. import pooling as float_pooling
from .module import QATModule


def _int8_average(x, p, kernel, stride, padding, count_include_pad):
    q = R.quantize(x.data, p.scale, p.zero_point, p.dtype)
    avg = K.avg_pool2d(q, int(p.zero_point), kernel, stride, padding, count_include_pad)
    return R.dequantize(avg, p.scale, p.zero_point).astype(x.dtype)


class _Pool(QATModule):
    with_weight = False

    def attach_quantizers(self, qconfig):
        self.qconfig = qconfig   # no observer: the output keeps the input's scale

    def snap(self, x, y, geometry):
        p = getattr(x, "qparams", None)
        if p is None or np.ndim(p.scale) != 0:
            return y
        out = y + Tensor(_int8_average(x, p, *geometry) - y.data)
        out.qparams = p
        return out


class AvgPool2d(float_pooling.AvgPool2d, _Pool):
    def forward(self, x):
        stride = self.kernel_size if self.stride is None else self.stride
        geometry = (self.kernel_size, stride, self.padding, self.count_include_pad)
        return self.snap(x, super().forward(x), geometry)


class AdaptiveAvgPool2d(float_pooling.AdaptiveAvgPool2d, _Pool):
    def forward(self, x):
        y = super().forward(x)
        if any(d % o for d, o in zip(x.shape[2:], y.shape[2:])):
            return y
        kernel = tuple(d // o for d, o in zip(x.shape[2:], y.shape[2:]))
        return self.snap(x, y, (kernel, kernel, 0, True))
