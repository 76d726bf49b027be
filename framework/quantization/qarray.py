"""How quantized activations travel: a Tensor whose `.data` is a `QArray`.

`QArray` is a uint8/int8 numpy array that carries `scale` (float) and `zero_point`
(int), like MegEngine's dtype metadata. numpy hands both to every *view* (reshape,
transpose, slicing, split), so the model code between quantized layers (flatten,
channel shuffle by reshape/permute, chunking) runs unchanged on int8. Arithmetic
(ufuncs) returns plain arrays: int8 values only mean something with their scale, so
nothing computes on them outside the int8 kernels.

>>> x = quantized_tensor(np.array([0.0, 0.5, 1.0], np.float32), 1 / 255, 0, np.uint8)
>>> x.data.tolist(), bool(x.data.scale == np.float32(1 / 255))
([0, 127, 255], True)
>>> dequantize_tensor(x).numpy()
array([0.        , 0.49803925, 1.        ], dtype=float32)
"""
import numpy as np

from ..tensor import Tensor
from . import kernels as K
from . import reference as R


_QDTYPES = (np.dtype(np.uint8), np.dtype(np.int8))


class QArray(np.ndarray):
    """uint8/int8 values with a per-tensor scale and zero point: real = (q - zp) * scale."""

    def __new__(cls, values, scale, zero_point):
        obj = np.asarray(values).view(cls)
        R.qrange(obj.dtype)
        obj.scale, obj.zero_point = np.float32(scale), int(zero_point)
        return obj

    def __array_finalize__(self, obj):
        self.scale = getattr(obj, "scale", None)
        self.zero_point = getattr(obj, "zero_point", None)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = [i.view(np.ndarray) if isinstance(i, QArray) else i for i in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, QArray) else o
                                  for o in kwargs["out"])
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __reduce__(self):
        # pickling (deepcopy, DataLoader) keeps the quantization parameters
        return (QArray, (self.view(np.ndarray).copy(), self.scale, self.zero_point))


def is_quantized(x):
    return isinstance(getattr(x, "data", x), QArray)


def quantized_tensor(x, scale, zero_point, dtype):
    """float array/Tensor -> Tensor(QArray): R.quantize (round half to even), natively."""
    values = np.asarray(getattr(x, "data", x), np.float32)
    return Tensor(QArray(K.quantize(values, scale, zero_point, dtype), scale, zero_point))


def wrap(values, scale, zero_point):
    """uint8/int8 numpy result of a kernel -> Tensor(QArray). Every int8 layer's output
    passes here: given a float32 scale and an int zero point (`QuantizedModule.output`), it
    converts nothing (half of QArray()'s cost)."""
    if values.dtype not in _QDTYPES:
        R.qrange(values.dtype)  # raises, naming the dtype
    q = values.view(QArray)
    q.scale = scale if type(scale) is np.float32 else np.float32(scale)
    q.zero_point = zero_point if type(zero_point) is int else int(zero_point)
    return Tensor._make(q, False, None)


def dequantize_tensor(x):
    """Tensor(QArray) -> float32 Tensor; anything else is returned as it is."""
    q = getattr(x, "data", x)
    if not isinstance(q, QArray):
        return x
    # C-contiguous whatever the layout of q (channels-last int8 activations)
    return Tensor(np.ascontiguousarray(R.dequantize(q.view(np.ndarray), q.scale, q.zero_point)))


def qarray_of(x, op):
    """The QArray inside a Tensor, or a TypeError naming `op`."""
    q = getattr(x, "data", x)
    if not isinstance(q, QArray):
        raise TypeError(f"{op}: expected a quantized tensor (Tensor of QArray), got "
                        f"{type(q).__name__} of dtype {getattr(q, 'dtype', '?')} and shape "
                        f"{getattr(q, 'shape', '?')}; is a QuantStub missing, or a float layer "
                        "(disable_quantize) feeding an int8 one?")
    return q
