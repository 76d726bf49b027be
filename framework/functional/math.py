"""Arithmetic, math, reductions and shape ops: thin wrappers over the primitives that
check arguments and name the op and the shapes when they are wrong."""
import builtins
import math

import numpy as np

from .. import dtypes
from ..ops import elementwise as E
from ..ops import linalg as L
from ..ops import reduce as R
from ..ops import shape as S
from ..tensor import Tensor, as_tensor
from ._args import same_grid


def _operands(a, b, op):
    """Both as tensors; a Python number or int tensor takes the float operand's dtype."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(f"{op}: expected at least one Tensor, got {type(a).__name__} and "
                        f"{type(b).__name__}")
    ref = a if isinstance(a, Tensor) else b
    a = a if isinstance(a, Tensor) else as_tensor(a, dtype=_scalar_dtype(a, ref.dtype))
    b = b if isinstance(b, Tensor) else as_tensor(b, dtype=_scalar_dtype(b, ref.dtype))
    fa, fb = dtypes.is_floating(a.dtype), dtypes.is_floating(b.dtype)
    if fa and not fb:
        b = b.astype(a.dtype)
    elif fb and not fa:
        a = a.astype(b.dtype)
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} cannot be broadcast "
                         "together") from None
    return a, b


def _scalar_dtype(value, like):
    if isinstance(value, (bool, np.bool_)):
        return like if like != dtypes.bool_ else dtypes.bool_
    if isinstance(value, (int, np.integer)):  # mask * 2 counts, as in PyTorch
        return dtypes.int64 if like == dtypes.bool_ else like
    if isinstance(value, (float, np.floating)):
        return like if dtypes.is_floating(like) else dtypes.float32
    return None


def _float_only(x, op):
    if not dtypes.is_floating(x.dtype):
        raise TypeError(f"{op}: expected a floating-point tensor, got dtype {x.dtype} (shape "
                        f"{x.shape})")
    return x


def add(a, b):
    return E.Add.apply(*_operands(a, b, "add"))


def sub(a, b):
    return E.Sub.apply(*_operands(a, b, "sub"))


def mul(a, b):
    return E.Mul.apply(*_operands(a, b, "mul"))


def div(a, b):
    a, b = _operands(a, b, "div")
    if not dtypes.is_floating(a.dtype):
        a, b = a.astype(dtypes.float32), b.astype(dtypes.float32)
    return E.Div.apply(a, b)


def pow(a, b):
    return E.Pow.apply(*_operands(a, b, "pow"))


def maximum(a, b):
    return E.Maximum.apply(*_operands(a, b, "maximum"))


def minimum(a, b):
    a, b = _operands(a, b, "minimum")
    return neg(E.Maximum.apply(neg(a), neg(b)))


def neg(x):
    return E.Neg.apply(as_tensor(x))


def exp(x):
    return E.Exp.apply(_float_only(as_tensor(x), "exp"))


def log(x):
    return E.Log.apply(_float_only(as_tensor(x), "log"))


def sqrt(x):
    return E.Sqrt.apply(_float_only(as_tensor(x), "sqrt"))


def abs(x):
    return E.Abs.apply(as_tensor(x))


def clip(x, min=None, max=None):
    if min is None and max is None:
        raise ValueError("clip: give at least one of min and max")
    return E.Clip.apply(as_tensor(x), lo=min, hi=max)


def where(cond, a, b):
    cond = as_tensor(cond)
    if cond.dtype != dtypes.bool_:
        raise TypeError(f"where: condition must be a bool tensor, got dtype {cond.dtype}")
    a, b = _operands(a, b, "where")
    try:
        np.broadcast_shapes(cond.shape, a.shape, b.shape)
    except ValueError:
        raise ValueError(f"where: condition {cond.shape}, x {a.shape} and y {b.shape} "
                         "cannot be broadcast together") from None
    return E.Where.apply(cond, a, b)


def matmul(a, b):
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must be at least 1-D, got shapes {a.shape} and "
                         f"{b.shape}")
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        raise ValueError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape} ({k_a} vs {k_b})")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dimensions of {a.shape} and {b.shape} cannot be "
                         "broadcast") from None
    if a.dtype != b.dtype:
        raise TypeError(f"matmul: operands have different dtypes {a.dtype} and {b.dtype}")
    return L.Matmul.apply(a, b)


# ---------------------------------------------------------------- reductions

def _axis(x, axis, op):
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if not -x.ndim <= a < builtins.max(x.ndim, 1):
            raise ValueError(f"{op}: axis {a} is out of range for a tensor of shape {x.shape}")
    axes = tuple(a % builtins.max(x.ndim, 1) for a in axes)
    return axes[0] if isinstance(axis, int) else axes


def sum(x, axis=None, keepdims=False):
    x = as_tensor(x)
    return R.Sum.apply(x, axis=_axis(x, axis, "sum"), keepdims=keepdims)


def mean(x, axis=None, keepdims=False):
    x = as_tensor(x)
    axis = _axis(x, axis, "mean")
    count = x.data.size if axis is None else int(np.prod([x.shape[a] for a in np.atleast_1d(axis)]))
    if not dtypes.is_floating(x.dtype):
        x = x.astype(dtypes.float32)
    return sum(x, axis, keepdims) / count


def var(x, axis=None, keepdims=False, ddof=0):
    """Variance as mean of squared deviations (ddof=1 for the unbiased estimate)."""
    x = as_tensor(x)
    axis = _axis(x, axis, "var")
    count = x.data.size if axis is None else int(np.prod([x.shape[a] for a in np.atleast_1d(axis)]))
    centered = x - mean(x, axis, keepdims=True)
    return sum(centered * centered, axis, keepdims) / (count - ddof)


def max(x, axis=None, keepdims=False):
    x = as_tensor(x)
    if x.data.size == 0:
        raise ValueError(f"max: cannot reduce an empty tensor of shape {x.shape}")
    return R.Max.apply(x, axis=_axis(x, axis, "max"), keepdims=keepdims)


def min(x, axis=None, keepdims=False):
    return neg(max(neg(x), axis, keepdims))


def argmax(x, axis=None, keepdims=False):
    x = as_tensor(x)
    return Tensor(np.argmax(x.data, axis=_axis(x, axis, "argmax"), keepdims=keepdims))


def argmin(x, axis=None, keepdims=False):
    x = as_tensor(x)
    return Tensor(np.argmin(x.data, axis=_axis(x, axis, "argmin"), keepdims=keepdims))


# ---------------------------------------------------------------- shape ops

def reshape(x, *shape):
    x = as_tensor(x)
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    try:
        target = _resolve_shape(x, shape)
    except ValueError as error:
        raise ValueError(f"reshape: cannot reshape {x.shape} ({x.data.size} elements) to {shape}: "
                         f"{error}") from None
    return same_grid(x, S.Reshape.apply(x, shape=target))


def _resolve_shape(x, shape):
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ValueError("only one dimension can be -1")
    known = math.prod(s for s in shape if s != -1)  # math.prod: np.prod's call costs more
    if -1 in shape:
        if known == 0 or x.data.size % known:
            raise ValueError("sizes do not divide")
        shape = tuple(x.data.size // known if s == -1 else s for s in shape)
    if math.prod(shape) != x.data.size:
        raise ValueError("element counts differ")
    return shape


def flatten(x, start_axis=0, end_axis=-1):
    x = as_tensor(x)
    if x.ndim == 0:
        return reshape(x, (1,))
    start, end = start_axis % x.ndim, end_axis % x.ndim
    shape = x.shape[:start] + (-1,) + x.shape[end + 1:]
    return reshape(x, shape)


def permute(x, *axes):
    x = as_tensor(x)
    axes = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
    if sorted(a % x.ndim for a in axes) != list(range(x.ndim)):
        raise ValueError(f"permute: axes {axes} are not a permutation of a {x.ndim}-D tensor's "
                         f"(shape {x.shape})")
    return same_grid(x, S.Permute.apply(x, axes=tuple(a % x.ndim for a in axes)))


def transpose(x, axis0=-2, axis1=-1):
    x = as_tensor(x)
    axes = list(range(x.ndim))
    axes[axis0], axes[axis1] = axes[axis1], axes[axis0]
    return permute(x, axes)


def broadcast_to(x, shape):
    x = as_tensor(x)
    shape = tuple(shape)
    try:
        np.broadcast_shapes(x.shape, shape)
        if np.broadcast_shapes(x.shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}") from None
    return S.Expand.apply(x, shape=shape)


def squeeze(x, axis=None):
    x = as_tensor(x)
    if axis is None:
        return reshape(x, tuple(n for n in x.shape if n != 1))
    axes = [a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis)]
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} has size {x.shape[a]}, not 1 (shape {x.shape})")
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def expand_dims(x, axis):
    x = as_tensor(x)
    return reshape(x, np.expand_dims(np.empty(x.shape, dtype=np.bool_), axis).shape)


def concat(tensors, axis=0):
    tensors = [as_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("concat: expected a non-empty sequence of tensors")
    first = tensors[0]
    axis = axis % first.ndim
    for i, t in enumerate(tensors):
        outside = t.shape[:axis] + t.shape[axis + 1:]
        if t.ndim != first.ndim or outside != first.shape[:axis] + first.shape[axis + 1:]:
            raise ValueError(f"concat: tensor {i} has shape {t.shape}, tensor 0 has {first.shape}; "
                             f"they must match except on axis {axis}")
    return S.Concat.apply(*tensors, axis=axis)


def stack(tensors, axis=0):
    tensors = [as_tensor(t) for t in tensors]
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"stack: all tensors must have the same shape, got {sorted(shapes)}")
    return concat([expand_dims(t, axis) for t in tensors], axis)


def split(x, sections, axis=0):
    """Split into equal `sections` (int) or pieces of the given sizes (list)."""
    x = as_tensor(x)
    n = x.shape[axis]
    if isinstance(sections, int):
        if n % sections:
            raise ValueError(f"split: axis {axis} of size {n} does not divide into {sections} "
                             "sections")
        sizes = [n // sections] * sections
    else:
        sizes = list(sections)
        if builtins.sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} do not add up to {n} (axis {axis} of "
                             f"{x.shape})")
    out, start = [], 0
    for size in sizes:
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, start + size)
        out.append(x[tuple(index)])
        start += size
    return out


def pad(x, pad_width, value=0.0):
    """numpy-style `pad_width`: ((before, after), ...) for every axis."""
    x = as_tensor(x)
    pad_width = tuple((int(lo), int(hi)) for lo, hi in pad_width)
    if len(pad_width) != x.ndim:
        raise ValueError(f"pad: pad_width has {len(pad_width)} entries for a {x.ndim}-D tensor "
                         f"(shape {x.shape})")
    return S.Pad.apply(x, pad_width=pad_width, value=value)


def gather(x, axis, index):
    """out[i][j] = x[index[i][j]][j] for axis 0 (take_along_axis)."""
    x, index = as_tensor(x), as_tensor(index)
    if not np.issubdtype(index.dtype, np.integer):
        raise TypeError(f"gather: index must be an integer tensor, got {index.dtype}")
    if index.ndim != x.ndim:
        raise ValueError(f"gather: index has {index.ndim} dims (shape {index.shape}), x has "
                         f"{x.ndim} (shape {x.shape})")
    return S.Gather.apply(x, index, axis=axis % x.ndim)

