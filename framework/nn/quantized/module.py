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

    def __setattr__(self, name, value):
        if name in ("scale", "zero_point"):  # new output quantization: drop what came of the old
            self.__dict__.pop("_out", None)
            if "_cache" in self.__dict__:
                self.__dict__["_cache"] = {}
        super().__setattr__(name, value)

    def _state_loaded(self):
        # constants worked out from the old scales (per input scale) are stale now
        self.__dict__.pop("_cache", None)
        self.__dict__.pop("_out", None)

    def output(self):
        """(scale as float32, zero point as int) of the output, as `wrap` takes them, read
        from the buffers once (until they are replaced or a state dict is loaded): looked up
        and converted per call, they were a large part of a small convolution's call
        (bench/RESULTS.md, Python overheads)."""
        out = self.__dict__.get("_out")
        if out is None:
            out = (np.float32(self.scale.data), int(self.zero_point.data))
            self.__dict__["_out"] = out
        return out

    @property
    def out_dtype(self):
        # by name: a deep-copied np.dtype is not the singleton the native bindings check for
        return np.dtype(self.dtype_name)

    @property
    def out_scale(self):
        return float(self.output()[0])

    @property
    def out_zero_point(self):
        return self.output()[1]

    def extra_repr(self):
        if "scale" not in self._buffers:
            return ""
        return (f"scale={self.out_scale:.6g}, zero_point={self.out_zero_point}, "
                f"dtype={self.out_dtype}")
