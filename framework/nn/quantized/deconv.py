"""Int8 transposed convolutions on the native kernel (framework/csrc/int8_deconv/): every QAT
ConvTranspose2d (plain, ReLU, BN-folded) becomes one, its weight quantized per output channel
and packed once, here.

The weight buffer keeps ConvTranspose2d's layout (C, OC/groups, kh, kw) (`weight_scale` is per
output channel, (OC,)); bias and requantization follow `conv.py`'s Conv2d: worked out once
per input scale, so a call is one native call (`kernels.PreparedDeconv`).

>>> import numpy as np, tianyuan as ty
>>> from tianyuan import nn, quantization as Q
>>> net = nn.Sequential(nn.QuantStub(), nn.ConvTranspose2d(4, 2, 4, 2, 1), nn.DequantStub())
>>> qat = Q.calibrate(Q.quantize_qat(net), [ty.randn(2, 4, 3, 3)])
>>> Q.quantize(qat)(ty.randn(1, 4, 3, 3)).shape
(1, 2, 6, 6)
"""
import numpy as np

from ...quantization import kernels as K
from ...quantization.qarray import qarray_of, wrap
from ...tensor import Tensor
from ..qat.deconv import deconv_layout
from .conv import _WeightedModule, relu6_max


class ConvTranspose2d(_WeightedModule):
    """Int8 transposed conv: (N, C, H, W) QArray -> (N, OC, OH, OW) QArray (NCHW)."""

    @classmethod
    def from_qat(cls, qat):
        m = cls()
        for key in ("in_channels", "out_channels", "kernel_size", "stride", "padding",
                    "output_padding", "dilation", "groups"):
            setattr(m, key, getattr(qat, key))
        m.set_weights(qat)       # quantized in the conv layout, per output channel
        m.register_buffer("weight", Tensor(np.ascontiguousarray(
            deconv_layout(m.weight.data, m.groups))))
        m.pack()
        return m

    def pack(self):
        self.packed = K.pack_deconv_weights(self.weight.data, self.groups)

    def prepared(self, s_in):
        """The PreparedDeconv for input scale s_in (made once per scale)."""
        key = ("deconv", float(s_in))
        if key not in self._cache:
            top = (relu6_max(self.out_scale, self.out_zero_point, self.out_dtype)
                   if self.activation == "relu6" else None)
            self._cache[key] = K.PreparedDeconv(
                self.packed, *self.requant(s_in), self.out_zero_point,
                self.activation is not None, self.out_dtype, self.stride, self.padding,
                self.output_padding, self.dilation, out_max=top)
        return self._cache[key]

    def forward(self, x):
        q = qarray_of(x, type(self).__name__)
        return wrap(self.prepared(q.scale)(q, q.zero_point), *self.output())

    def graph_step(self, x):
        """For `jit.trace`: this layer as a function of the input's array."""
        q = qarray_of(x, type(self).__name__)
        run, zero_point = self.prepared(q.scale), q.zero_point
        return lambda a: run(a, zero_point)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, "
                f"output_padding={self.output_padding}, groups={self.groups}, "
                f"activation={self.activation}, " + super().extra_repr())


class ConvTransposeReLU2d(ConvTranspose2d):
    pass


class ConvTransposeBn2d(ConvTranspose2d):
    pass


class ConvTransposeBnReLU2d(ConvTranspose2d):
    pass
