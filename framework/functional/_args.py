"""Argument normalisation shared by the spatial functional ops (conv, pooling, vision)."""
import numbers

from .. import dtypes
from ..tensor import Tensor


_IMAGE_DTYPES = frozenset((dtypes.float32, dtypes.float64))


def image_tensor(x, op, name="input"):
    """A 4-D (N, C, H, W) floating tensor, or a TypeError/ValueError naming `op` and `name`."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(x).__name__}")
    if x.ndim != 4:
        raise ValueError(f"{op}: {name} must be 4-D (N, C, H, W), got shape {x.shape}")
    if x.dtype not in _IMAGE_DTYPES:
        raise TypeError(f"{op}: {name} must be float32 or float64, got {x.dtype} (shape {x.shape})")
    return x


def pair(value, name, op, minimum=0):
    """int or (a, b) -> (a, b) of ints >= minimum."""
    if type(value) is int and value >= minimum:  # fast path: per-call cost of every conv
        return value, value
    if (type(value) is tuple and len(value) == 2 and type(value[0]) is type(value[1]) is int
            and min(value) >= minimum):
        return value
    if isinstance(value, numbers.Integral):
        value = (value, value)
    try:
        out = tuple(int(v) for v in value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}") from None
    if len(out) != 2 or any(int(v) != v for v in value):
        raise ValueError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
    if min(out) < minimum:
        raise ValueError(f"{op}: {name} must be >= {minimum}, got {value!r}")
    return out


def padding4(value, op, allow_four=True):
    """int, (ph, pw) or (top, bottom, left, right) -> (top, bottom, left, right), all >= 0."""
    if isinstance(value, (tuple, list)) and len(value) == 4 and allow_four:
        out = tuple(int(v) for v in value)
        if min(out) < 0:
            raise ValueError(f"{op}: padding must be >= 0, got {value!r}")
        return out
    ph, pw = pair(value, "padding", op)
    return ph, ph, pw, pw


def same_grid(x, out):
    """out, whose values are some of x's moved (a reshape, permute, max pool), keeps x's
    quantization grid (`qparams`, the mark of QAT's fake-quantized outputs), so that an
    eval-mode QAT layer after it still computes its int8 twin's integers (nn/qat/module.py)."""
    p = getattr(x, "qparams", None)
    if p is not None:
        out.qparams = p
    return out
