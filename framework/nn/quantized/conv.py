"""Int8 convolutions on the native kernels: every QAT conv (plain, ReLU, ReLU6, BN-folded)
becomes an int8 conv with its weights quantized and packed once, here.

Per call, with s_in the input's scale: bias_q = round(b / (s_in * s_w)) (int32) and the
requantization multipliers m, shift of ``s_in * s_w / s_out`` are computed once per
input scale and cached (as a `kernels.PreparedConv` or `kernels.PreparedLinear`, so a
call is one native call). ReLU clamps at the zero point inside the kernel; ReLU6 also at
``zp + round(6 / s_out)`` (the same as fake-quantizing relu6: rounding is monotone).
"""
import numpy as np

from ...quantization import kernels as K
from ...quantization import reference as R
from ...quantization.qarray import qarray_of, wrap
from ...quantization.reference import relu6_max, requant_params  # noqa: F401 (re-exported)
from ...tensor import Tensor
from ..qat.conv import conv_padding
from .module import QuantizedModule

class _WeightedModule(QuantizedModule):
    """Shared by Conv2d and Linear: int8 weight per channel, float bias, output qparams."""
    graph_derived = ("packed",)   # a graph file leaves it out: _state_loaded packs again

    def set_weights(self, qat):
        w, b = qat.folded()
        qat.weight_observer(w)   # as they are now (it watches in eval too, unless disabled)
        p = qat.weight_qparams()
        w = w.data
        self.register_buffer("weight", Tensor(R.quantize(w, p.scale, 0, np.int8, axis=0)))
        self.register_buffer("weight_scale", Tensor(np.asarray(p.scale, np.float32)))
        bias = np.zeros(w.shape[0], np.float32) if b is None else b.data.astype(np.float32)
        self.register_buffer("bias", Tensor(bias))
        self.set_output(qat.act_qparams())
        self.activation = qat.activation
        self._cache = {}

    def _state_loaded(self):
        super()._state_loaded()  # drops _cache
        self._cache = {}
        self.pack()

    def requant(self, s_in):
        key = float(s_in)
        if key not in self._cache:
            self._cache[key] = requant_params(key, self.weight_scale.data, self.bias.data,
                                              self.out_scale)
        return self._cache[key]


class Conv2d(_WeightedModule):
    """Int8 conv: (N, C, H, W) QArray -> (N, OC, OH, OW) QArray, channels-last if the input
    is. `channels_last` (set by `quantize` where every conv of the model takes the
    channels-last engine): the result channels-last whatever the input's layout, where that
    layout wins (`kernels.channels_last_wins`), so that the layers after the first conv read
    and write channels-last (`kernels.is_channels_last`)."""
    channels_last = False

    @classmethod
    def from_qat(cls, qat):
        m = cls()
        for key in ("in_channels", "out_channels", "kernel_size", "stride", "dilation",
                    "groups"):
            setattr(m, key, getattr(qat, key))
        m.padding = conv_padding(qat)
        m.set_weights(qat)
        m.pack()
        return m

    def pack(self):
        self.packed = K.pack_weights(self.weight.data, self.groups)

    def prepared(self, s_in):
        """The PreparedConv for input scale s_in (made once per scale)."""
        key = ("conv", float(s_in))
        if key not in self._cache:
            bias, mult, shift = self.requant(s_in)
            top = (relu6_max(self.out_scale, self.out_zero_point, self.out_dtype)
                   if self.activation == "relu6" else None)
            self._cache[key] = K.PreparedConv(
                self.packed, bias, mult, shift, self.out_zero_point,
                self.activation is not None, self.out_dtype, self.stride, self.padding,
                self.dilation, out_max=top)
        return self._cache[key]

    def kernel(self, q):
        """The native function f(x, x_zero_point) for input q's scale and layout."""
        # the cached prepared conv at once (prepared()'s key: an input scale equals its float)
        prepared = self._cache.get(("conv", q.scale)) or self.prepared(q.scale)
        if self.channels_last and K.channels_last_wins():
            return prepared.channels_last
        if q.flags.c_contiguous:
            # the native call itself (PreparedConv.run), which checks x against the weights
            return prepared.run
        return prepared  # channels-last, or a copy

    def forward(self, x):
        q = qarray_of(x, type(self).__name__)
        return wrap(self.kernel(q)(q, q.zero_point), *self.output())

    def graph_step(self, x):
        """For `jit.trace`: this conv as a function of the input's array."""
        q = qarray_of(x, type(self).__name__)
        run, zero_point = self.kernel(q), q.zero_point
        return lambda a: run(a, zero_point)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, groups={self.groups}, "
                f"activation={self.activation}, " + super().extra_repr())


class ConvReLU2d(Conv2d):
    pass


class ConvReLU62d(Conv2d):
    pass


class ConvBn2d(Conv2d):
    pass


class ConvBnReLU2d(Conv2d):
    pass


class ConvBnReLU62d(Conv2d):
    pass


class Linear(_WeightedModule):
    """Int8 linear: (..., K) QArray -> (..., N) QArray."""

    @classmethod
    def from_qat(cls, qat):
        m = cls()
        m.in_features, m.out_features = qat.in_features, qat.out_features
        m.set_weights(qat)
        m.pack()
        return m

    def pack(self):
        self.packed = K.pack_weights(self.weight.data)

    def prepared(self, s_in):
        """The PreparedLinear for input scale s_in (made once per scale)."""
        key = ("linear", float(s_in))
        if key not in self._cache:
            self._cache[key] = K.PreparedLinear(self.packed, *self.requant(s_in),
                                                self.out_zero_point,
                                                self.activation is not None, self.out_dtype)
        return self._cache[key]

    def kernel(self, q):
        """The function of q's array (..., K) -> (..., N), ReLU6's upper clamp included."""
        prepared, zero_point, features = self.prepared(q.scale), q.zero_point, self.out_features
        top = (relu6_max(self.out_scale, self.out_zero_point, self.out_dtype)
               if self.activation == "relu6" else None)
        dtype = self.out_dtype

        def run(a):
            flat = np.ascontiguousarray(a.reshape(-1, a.shape[-1]))  # (M, K)
            out = prepared(flat, zero_point).reshape(a.shape[:-1] + (features,))
            return out if top is None else np.minimum(out, top).astype(dtype)
        return run

    def forward(self, x):
        q = qarray_of(x, type(self).__name__)
        return wrap(self.kernel(q)(q.view(np.ndarray)), *self.output())

    def graph_step(self, x):
        """For `jit.trace`: this layer as a function of the input's array."""
        return self.kernel(qarray_of(x, type(self).__name__))

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"activation={self.activation}, " + super().extra_repr())


class LinearReLU(Linear):
    pass

