"""Tensor: a numpy array with a dtype, a shape, and (for floats) a gradient.

>>> import tianyuan as ty
>>> x = ty.tensor([[1.0, 2.0]], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad.numpy()
array([[2., 4.]], dtype=float32)
"""
import itertools

import numpy as np

from . import autograd, dtypes
from .random import rng

_hook_ids = itertools.count()


def _to_array(data, dtype):
    if isinstance(data, Tensor):
        data = data.data
    if isinstance(data, np.ndarray):
        arr = data if dtype is None else data.astype(dtype, copy=False)
    else:
        arr = np.asarray(data, dtype=dtype)
        if dtype is None and arr.dtype == np.float64:
            arr = arr.astype(np.float32)
    if arr.dtype not in dtypes.SUPPORTED:
        raise TypeError(f"tensor: unsupported dtype {arr.dtype} (shape {arr.shape}); "
                        f"expected one of {[str(d) for d in dtypes.SUPPORTED]}")
    return arr


class _HookHandle:
    def __init__(self, hooks, key):
        self.hooks, self.key = hooks, key

    def remove(self):
        self.hooks.pop(self.key, None)


class Tensor:
    """Wraps a numpy array; `requires_grad` makes ops on it record a graph."""

    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __init__(self, data, dtype=None, requires_grad=False):
        self.data = _to_array(data, dtypes.as_dtype(dtype))
        self.grad = None
        self._ctx = None
        self._hooks = {}
        self._retains_grad = False
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_(True)

    @classmethod
    def _make(cls, array, requires_grad, ctx):
        t = cls.__new__(cls)
        t.data = array if isinstance(array, np.ndarray) else np.asarray(array)
        t.grad, t._ctx, t._hooks, t._retains_grad = None, ctx, {}, False
        t.requires_grad = requires_grad
        return t

    # ------------------------------------------------------------ properties
    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    def numel(self):
        return self.data.size

    @property
    def is_leaf(self):
        return self._ctx is None

    @property
    def T(self):
        return self.permute(tuple(reversed(range(self.ndim))))

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({np.array2string(self.data, separator=', ')}, dtype={self.dtype}{grad})"

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    # ------------------------------------------------------------ conversion
    def numpy(self):
        return self.data

    def item(self):
        if self.data.size != 1:
            raise ValueError(f"item: only a one-element tensor converts to a Python number, got shape {self.shape}")
        return self.data.item()

    def tolist(self):
        return self.data.tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)

    def astype(self, dtype):
        dtype = dtypes.as_dtype(dtype, "astype")
        if dtype == self.dtype:
            return self
        if dtypes.is_floating(dtype) and dtypes.is_floating(self.dtype):
            from .ops.misc import Cast

            return Cast.apply(self, dtype=dtype)
        return Tensor(self.data.astype(dtype))

    def float(self):
        return self.astype(dtypes.float32)

    def double(self):
        return self.astype(dtypes.float64)

    def long(self):
        return self.astype(dtypes.int64)

    # ------------------------------------------------------------ autograd
    def requires_grad_(self, flag=True):
        if flag and not dtypes.is_floating(self.dtype):
            raise TypeError(f"requires_grad: only floating-point tensors can require grad, got {self.dtype}")
        self.requires_grad = bool(flag)
        return self

    def backward(self, grad=None, retain_graph=False):
        autograd.backward(self, grad, retain_graph)

    def detach(self):
        return Tensor._make(self.data, False, None)

    def retain_grad(self):
        self._retains_grad = True
        return self

    def register_hook(self, fn):
        """`fn(grad) -> grad or None` runs when this tensor's gradient is computed."""
        if not self.requires_grad:
            raise RuntimeError("register_hook: cannot register a hook on a tensor that does not require grad")
        key = next(_hook_ids)
        self._hooks[key] = fn
        return _HookHandle(self._hooks, key)

    # ------------------------------------------------------------ in place (no graph)
    def __setitem__(self, index, value):
        if self.requires_grad and autograd.is_grad_enabled():
            raise RuntimeError("setitem: in-place assignment into a tensor that requires grad; "
                               "do it under no_grad() or build a new tensor")
        self.data[_index(index)] = getattr(value, "data", value)

    def copy_(self, other):
        other = getattr(other, "data", other)
        if np.shape(other) != self.shape:
            raise ValueError(f"copy_: source shape {np.shape(other)} differs from destination {self.shape}")
        self.data[...] = other
        return self

    def zero_(self):
        self.data[...] = 0
        return self


def _index(index):
    if isinstance(index, Tensor):
        return index.data
    if isinstance(index, tuple):
        return tuple([i.data if isinstance(i, Tensor) else i for i in index])
    return index


# ---------------------------------------------------------------- creation

def tensor(data, dtype=None, requires_grad=False):
    """A new tensor (always a copy); Python floats become float32, Python ints int64."""
    if isinstance(data, Tensor):
        data = data.data
    if isinstance(data, np.ndarray):
        data = data.copy()
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


def as_tensor(data, dtype=None):
    """`data` itself if it is already a tensor of that dtype; no copy where none is needed."""
    if isinstance(data, Tensor) and (dtype is None or data.dtype == dtype):
        return data
    return Tensor(data, dtype=dtype)


def _shape(shape):
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


def _dtype(dtype):
    return dtypes.as_dtype(dtype) or dtypes.float32


def zeros(*shape, dtype=None, requires_grad=False):
    return Tensor(np.zeros(_shape(shape), _dtype(dtype)), requires_grad=requires_grad)


def ones(*shape, dtype=None, requires_grad=False):
    return Tensor(np.ones(_shape(shape), _dtype(dtype)), requires_grad=requires_grad)


def full(shape, value, dtype=None, requires_grad=False):
    return Tensor(np.full(tuple(shape), value, _dtype(dtype)), requires_grad=requires_grad)


def arange(start, stop=None, step=1, dtype=None):
    values = np.arange(start, stop, step) if stop is not None else np.arange(start)
    return Tensor(values, dtype=dtype)


def randn(*shape, dtype=None, requires_grad=False):
    return Tensor(rng().standard_normal(_shape(shape)).astype(_dtype(dtype)), requires_grad=requires_grad)


def rand(*shape, dtype=None, requires_grad=False):
    return Tensor(rng().random(_shape(shape)).astype(_dtype(dtype)), requires_grad=requires_grad)


def zeros_like(x, dtype=None, requires_grad=False):
    return Tensor(np.zeros(x.shape, dtypes.as_dtype(dtype) or x.dtype), requires_grad=requires_grad)


def ones_like(x, dtype=None, requires_grad=False):
    return Tensor(np.ones(x.shape, dtypes.as_dtype(dtype) or x.dtype), requires_grad=requires_grad)


def full_like(x, value, dtype=None, requires_grad=False):
    return Tensor(np.full(x.shape, value, dtypes.as_dtype(dtype) or x.dtype), requires_grad=requires_grad)


def randn_like(x, dtype=None, requires_grad=False):
    return randn(x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def rand_like(x, dtype=None, requires_grad=False):
    return rand(x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def _install_operators():
    from .functional import math as M
    from .ops.shape import GetItem

    def getitem(self, index):
        return GetItem.apply(self, index=_index(index))

    def compare(fn):
        def op(self, other):
            return Tensor(fn(self.data, getattr(other, "data", other)))
        return op

    def reflected(fn):
        return lambda self, other: fn(other, self)

    methods = {
        "__add__": M.add, "__radd__": reflected(M.add), "__sub__": M.sub,
        "__rsub__": reflected(M.sub), "__mul__": M.mul, "__rmul__": reflected(M.mul),
        "__truediv__": M.div, "__rtruediv__": reflected(M.div), "__pow__": M.pow,
        "__rpow__": reflected(M.pow), "__matmul__": M.matmul, "__rmatmul__": reflected(M.matmul),
        "__neg__": M.neg, "__abs__": M.abs, "__getitem__": getitem,
        "__lt__": compare(np.less), "__le__": compare(np.less_equal),
        "__gt__": compare(np.greater), "__ge__": compare(np.greater_equal),
        "__eq__": compare(np.equal), "__ne__": compare(np.not_equal),
        "sum": M.sum, "mean": M.mean, "var": M.var, "max": M.max, "min": M.min,
        "argmax": M.argmax, "argmin": M.argmin, "reshape": M.reshape, "flatten": M.flatten,
        "permute": M.permute, "transpose": M.transpose, "squeeze": M.squeeze,
        "expand_dims": M.expand_dims, "unsqueeze": M.expand_dims, "broadcast_to": M.broadcast_to,
        "exp": M.exp, "log": M.log, "sqrt": M.sqrt, "abs": M.abs, "clip": M.clip, "pow": M.pow,
        "matmul": M.matmul,
    }
    for name, fn in methods.items():
        setattr(Tensor, name, fn)
    Tensor.__hash__ = object.__hash__
    Tensor.view = M.reshape


_install_operators()
