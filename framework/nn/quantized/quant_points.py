"""Int8 quantization points: QuantStub (float -> uint8/int8), DequantStub (-> float),
Add / AddReLU (the residual add, requantized to the output scale) and Concat (each input
requantized to the output scale, then joined)."""
import numpy as np

from ...quantization import kernels as K
from ...quantization import reference as R
from ...quantization.qarray import (QArray, dequantize_tensor, qarray_of, quantized_tensor,
                                     wrap)
from .module import QuantizedModule


class QuantStub(QuantizedModule):
    @classmethod
    def from_qat(cls, qat):
        m = cls()
        m.set_output(qat.act_qparams())
        return m

    def forward(self, x):
        return quantized_tensor(x, self.out_scale, self.out_zero_point, self.out_dtype)

    def graph_step(self, x):
        """For `jit.trace`: float array -> its quantized values."""
        scale, zero_point, dtype = self.out_scale, self.out_zero_point, self.out_dtype
        return lambda a: K.quantize(a, scale, zero_point, dtype)


class DequantStub(QuantizedModule):
    @classmethod
    def from_qat(cls, qat):
        return cls()

    def forward(self, x):
        return dequantize_tensor(x)

    def graph_step(self, x):
        """For `jit.trace`: int8 array -> float32 (C-contiguous), as forward gives; None
        for a float input (which forward passes through)."""
        q = x.data
        if not isinstance(q, QArray):
            return None
        scale, zero_point = q.scale, q.zero_point
        return lambda a: np.ascontiguousarray(R.dequantize(a, scale, zero_point))


class Add(QuantizedModule):
    relu = False

    @classmethod
    def from_qat(cls, qat):
        m = cls()
        m.set_output(qat.act_qparams())
        return m

    def prepared(self, qa, qb):
        """The `kernels.PreparedAdd` for these inputs' scales and zero points, made once per
        pair of them."""
        cache = self.__dict__.setdefault("_cache", {})
        key = (qa.scale, qa.zero_point, qb.scale, qb.zero_point)
        prepared = cache.get(key)
        if prepared is None:
            ma, mb, shift = R.add_multipliers(qa.scale, qb.scale, self.out_scale)
            prepared = cache[key] = K.PreparedAdd(qa.zero_point, qb.zero_point, ma, mb, shift,
                                                  self.out_zero_point, self.relu,
                                                  self.out_dtype)
        return prepared

    def forward(self, a, b):
        op = type(self).__name__
        qa, qb = qarray_of(a, op), qarray_of(b, op)
        if qa.dtype != qb.dtype or qa.shape != qb.shape:
            raise ValueError(f"{op}: inputs differ: {qa.dtype} {qa.shape} and {qb.dtype} "
                             f"{qb.shape}")
        return wrap(self.prepared(qa, qb)(qa, qb), *self.output())

    def graph_step(self, a, b):
        """For `jit.trace`: the prepared add, a function of the two arrays."""
        return self.prepared(qarray_of(a, "Add"), qarray_of(b, "Add"))


class AddReLU(Add):
    relu = True


class Concat(QuantizedModule):
    @classmethod
    def from_qat(cls, qat):
        m = cls()
        m.axis, m.shuffle = qat.axis, qat.shuffle
        m.set_output(qat.act_qparams())
        return m

    def prepared(self, qs):
        """The `kernels.PreparedConcat` for these inputs' scales and zero points, made once
        per tuple of them."""
        cache = self.__dict__.setdefault("_cache", {})
        key = tuple([(q.scale, q.zero_point) for q in qs])
        prepared = cache.get(key)
        if prepared is None:
            scales = np.array([float(scale) for scale, _ in key], np.float64)
            m, s = R.quantize_multiplier(scales / self.out_scale)
            prepared = cache[key] = K.PreparedConcat(
                [zp for _, zp in key], m, s, self.out_zero_point, self.out_dtype, self.axis,
                self.shuffle)
        return prepared

    def forward(self, tensors):
        qs = [qarray_of(t, "Concat") for t in tensors]
        return wrap(self.prepared(qs)(qs), *self.output())

    def graph_step(self, tensors):
        """For `jit.trace`: the prepared concat, a function of the list of arrays."""
        return self.prepared([qarray_of(t, "Concat") for t in tensors])
