"""Read MegEngine `.pkl` weights without megengine: pickled dicts of numpy arrays.

`megengine.save` is a plain pickle of `{name: np.ndarray}` (checkpoints wrap it as
`{"epoch", "state_dict"}`). Quantized weights are int8/uint8/int32 arrays whose dtype
metadata says `{"mgb_dtype": {"name": "QuantizedS8", "scale": s[, "zero_point": z]}}`;
they come back as QTensor. Only numpy's reconstructors are admitted.

>>> state = load_megengine("resnet50_fbaug_76254_4e14b7d1.pkl")
"""
from collections import OrderedDict

import numpy as np

from tianyuan.io import BYTES_GLOBALS, NUMPY_GLOBALS, safe_unpickle

from .qtensor import QTensor

_ALLOWED = {**NUMPY_GLOBALS, **BYTES_GLOBALS, ("collections", "OrderedDict"): OrderedDict}
# MegEngine quantized dtype names -> ours.
_QUANT_NAMES = {"QuantizedS8": "qint8", "Quantized8Asymm": "quint8", "QuantizedS32": "qint32",
                "QuantizedS4": "qint4", "Quantized4Asymm": "quint4", "QuantizedS16": "qint16"}


def load_megengine(path):
    """Unpickle a MegEngine file; quantized arrays become QTensor (per-tensor scale)."""
    obj = safe_unpickle(path, allowed=_ALLOWED, encoding="latin1")
    return _convert(obj, str(path))


def _convert(obj, source):
    if isinstance(obj, np.ndarray):
        return _maybe_quantized(obj, source)
    if isinstance(obj, dict):
        out = type(obj)() if isinstance(obj, OrderedDict) else {}
        for key, value in obj.items():
            out[key] = _convert(value, source)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_convert(v, source) for v in obj)
    return obj


def _maybe_quantized(array, source):
    meta = (array.dtype.metadata or {}).get("mgb_dtype")
    if not meta:
        return array
    try:
        name, scale = str(meta.get("name", "")), np.float64(meta["scale"])
        zero = np.int64(meta.get("zero_point", 0))
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"{source}: a quantized array's dtype metadata {str(meta)[:100]!r} is "
                         "not {'name', 'scale'[, 'zero_point']} "
                         f"({type(error).__name__}: {error})") from None
    values = array.view(np.dtype(array.dtype.str))  # drop the metadata
    return QTensor(values, np.asarray(scale), np.asarray(zero), -1, _QUANT_NAMES.get(name, name))
