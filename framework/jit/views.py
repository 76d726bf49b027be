"""Views between traced modules (slices and reshapes written in a forward) as specs a graph
replays and a graph file stores.

A spec is ("slice", per axis (start, stop) or None for the whole axis) or ("reshape",
shape), where a reshape that keeps the leading (batch) axis has -1 there: both then hold
for any batch size (`trace(..., dynamic_batch=True)`).
"""
import numpy as np


def owner(array):
    """The array that owns array's memory."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _same_view(a, b):
    return (a.shape == b.shape and a.strides == b.strides and
            a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def view_function(spec):
    """The function a -> the view that `spec` describes."""
    kind, arg = spec
    if kind == "slice":
        index = tuple(slice(None) if bounds is None else slice(*bounds) for bounds in arg)
        return lambda a: a[index]
    if kind == "reshape":
        shape = tuple(arg)
        return lambda a: a.reshape(shape)
    raise ValueError(f"unknown view {kind!r}")


def view_spec(array, view):
    """The spec of view as a block of array (basic slicing with unit steps) or a reshape of
    it; None if it is neither."""
    if view.dtype != array.dtype:
        return None
    delta = view.__array_interface__["data"][0] - array.__array_interface__["data"][0]
    if view.ndim == array.ndim and view.strides == array.strides:
        starts = [0] * array.ndim
        for axis in sorted(range(array.ndim), key=lambda i: -abs(array.strides[i])):
            if array.strides[axis] > 0:
                starts[axis], delta = divmod(delta, array.strides[axis])
        spec = ("slice", tuple(None if (o, n) == (0, whole) else (o, o + n)
                               for o, n, whole in zip(starts, view.shape, array.shape)))
        if (delta == 0 and all(o >= 0 for o in starts) and
                _same_view(view_function(spec)(array), view)):
            return spec
    if delta == 0 and view.size == array.size:
        reshaped = array.reshape(view.shape)
        if np.shares_memory(reshaped, array) and _same_view(reshaped, view):
            keeps_batch = view.ndim and array.ndim and view.shape[0] == array.shape[0] and \
                np.prod(view.shape[1:], dtype=np.int64) > 0
            return ("reshape", ((-1,) + view.shape[1:]) if keeps_batch else view.shape)
    return None
