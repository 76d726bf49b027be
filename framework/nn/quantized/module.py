"""QuantizedModule: the base of every `nn.quantized` class.

Inputs and outputs are Tensors of `QArray` (uint8/int8 values carrying scale and zero
point, see `tianyuan.quantization.qarray`). `from_qat` builds the int8 module from a
QAT module of the same name; state lives in buffers (int8 weights, float bias and
scales), so `state_dict()` is the int8 model's file content.
"""
import numpy as np

from ...tensor import Tensor
from ..module import Module


class QuantizedModule(Module):
    def set_output(self, qparams):
        """Output scale, zero point and dtype from the QAT module's activation qparams."""
        self.register_buffer("scale", Tensor(np.asarray(qparams.scale, np.float32)))
        self.register_buffer("zero_point", Tensor(np.asarray(qparams.zero_point, np.int64)))
        self.dtype_name = str(np.dtype(qparams.dtype))

    def _state_loaded(self):
        # constants worked out from the old scales (per input scale) are stale now
        self.__dict__.pop("_cache", None)

    @property
    def out_dtype(self):
        # by name: a deep-copied np.dtype is not the singleton the native bindings check for
        return np.dtype(self.dtype_name)

    @property
    def out_scale(self):
        return float(self.scale.data)

    @property
    def out_zero_point(self):
        return int(self.zero_point.data)

    def extra_repr(self):
        if "scale" not in self._buffers:
            return ""
        return (f"scale={self.out_scale:.6g}, zero_point={self.out_zero_point}, "
                f"dtype={self.out_dtype}")
