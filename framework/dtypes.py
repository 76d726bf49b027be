"""Dtypes are numpy's; these names are the ones the API accepts."""
import numpy as np

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
float16 = np.dtype(np.float16)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)

SUPPORTED = (float16, float32, float64, int8, uint8, int32, int64, bool_)
_NAMES = {str(d): d for d in SUPPORTED}
_NAMES["bool"] = bool_


def as_dtype(dtype, where="tensor"):
    """A numpy dtype from a name, numpy type or dtype; names the caller on error."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        if dtype not in _NAMES:
            raise TypeError(f"{where}: unknown dtype '{dtype}'; expected one of {sorted(_NAMES)}")
        return _NAMES[dtype]
    d = np.dtype(dtype)
    if d not in SUPPORTED:
        raise TypeError(f"{where}: unsupported dtype {d}; expected one of {sorted(_NAMES)}")
    return d


def is_floating(dtype):
    return np.issubdtype(dtype, np.floating)
