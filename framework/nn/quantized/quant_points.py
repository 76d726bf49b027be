"""Int8 quantization points: QuantStub (float -> uint8/int8), DequantStub (-> float),
Add / AddReLU (the residual add, requantized to the output scale) and Concat (each input
requantized to the output scale, then joined)."""
import numpy as np

from ...quantization import kernels as K
from ...quantization import reference as R
from ...quantization.qarray import dequantize_tensor, qarray_of, quantized_tensor, wrap
from .module import QuantizedModule


class QuantStub(QuantizedModule):
    @classmethod
    def from_qat(cls, qat):
        m = cls()
        m.set_output(qat.act_qparams())
        return m

    def forward(self, x):
        return quantized_tensor(x, self.out_scale, self.out_zero_point, self.out_dtype)


class DequantStub(QuantizedModule):
    @classmethod
    def from_qat(cls, qat):
        return cls()

    def forward(self, x):
        return dequantize_tensor(x)


class Add(QuantizedModule):
    relu = False

    @classmethod
    def from_qat(cls, qat):
        m = cls()
        m.set_output(qat.act_qparams())
        return m

    def multipliers(self, scale_a, scale_b):
        """(m_a, m_b, shift) for these input scales, worked out once per pair."""
        cache = self.__dict__.setdefault("_cache", {})
        key = (float(scale_a), float(scale_b))
        if key not in cache:
            cache[key] = R.add_multipliers(scale_a, scale_b, self.out_scale)
        return cache[key]

    def forward(self, a, b):
        op = type(self).__name__
        qa, qb = qarray_of(a, op), qarray_of(b, op)
        if qa.dtype != qb.dtype or qa.shape != qb.shape:
            raise ValueError(f"{op}: inputs differ: {qa.dtype} {qa.shape} and {qb.dtype} "
                             f"{qb.shape}")
        ma, mb, shift = self.multipliers(qa.scale, qb.scale)
        out = K.add(qa, qa.zero_point, qb, qb.zero_point, ma, mb, shift, self.out_zero_point,
                    self.relu, self.out_dtype)
        return wrap(out, *self.output())


class AddReLU(Add):
    relu = True


class Concat(QuantizedModule):
    @classmethod
    def from_qat(cls, qat):
        m = cls()
        m.axis, m.shuffle = qat.axis, qat.shuffle
        m.set_output(qat.act_qparams())
        return m

    def multipliers(self, scales):
        """(m, shift) lists of ints rescaling each input scale to the output's, once per tuple."""
        cache = self.__dict__.setdefault("_cache", {})
        key = tuple(float(s) for s in scales)
        if key not in cache:
            m, s = R.quantize_multiplier(np.array(key, np.float64) / self.out_scale)
            cache[key] = [int(v) for v in m], [int(v) for v in s]
        return cache[key]

    def forward(self, tensors):
        qs = [qarray_of(t, "Concat") for t in tensors]
        mult, shift = self.multipliers([q.scale for q in qs])
        out = K.concat(qs, [q.zero_point for q in qs], mult, shift, self.out_zero_point,
                       self.out_dtype, self.axis, self.shuffle)
        return wrap(out, *self.output())
