"""Fake quantizers: float -> quantize -> dequantize in the forward pass, a surrogate
gradient in the backward pass. Both are autograd Functions on numpy arrays.

- `FakeQuantizeSTE`: the straight-through estimator with clipping: dy/dx = 1 where
  ``qmin <= round(x / s) + zp <= qmax``, else 0 (Bengio et al. 2013; Jacob et al. 2018).
- `LSQFunction`: learned step size (Esser et al. 2020, arXiv 1902.08153): the STE for
  x, and for the scale ``dy/ds = round(x/s) - x/s`` inside the range, ``qmin - zp`` or
  ``qmax - zp`` where clipped, times ``g = 1 / sqrt(N * qmax)`` (N values per scale).

The forward rounding is `reference.quantize` (round half to even in float32), the
spec the int8 kernels follow.

Modules (`FakeQuantize`, `LSQFakeQuantize`) take the tensor and its observer:
``y = fq(x, observer)``; `qparams(observer)` gives what `quantize()` freezes into int8.
"""
import numpy as np

from .. import _C
from ..autograd import Function
from ..nn.module import Module
from ..nn.parameter import Parameter
from ..ops.elementwise import StraightThrough, pass_grad
from ..tensor import Tensor
from . import reference as R
from .observer import QParams


def _shape(ndim, axis):
    shape = [1] * ndim
    if axis is not None:
        shape[axis] = -1
    return shape


def _fake_quant(x, scale, zero_point, dtype, axis):
    """(float32 fake-quantized x, q int, inside mask, x/s) for the backward passes."""
    q = R.quantize(x, scale, zero_point, dtype, axis)
    y = R.dequantize(q, scale, zero_point, axis).astype(x.dtype, copy=False)
    s = np.asarray(scale, np.float32).reshape(_shape(x.ndim, axis))
    z = np.asarray(zero_point, np.int64).reshape(_shape(x.ndim, axis))
    lo, hi = R.qrange(dtype)
    n = np.rint(np.asarray(x, np.float32) / s) + z
    return y, q.astype(np.int64) - z, (n >= lo) & (n <= hi), s


def _fake_quant_native(x, scale, zero_point, dtype, axis):
    """_fake_quant's y and inside mask in one native pass (float32 x; the same bits):
    not numpy's dozen passes through int64 (bench/RESULTS.md, training: QAT)."""
    R.qrange(dtype)  # uint8 or int8, else the reference's error
    return _C.fake_quantize(x, np.atleast_1d(np.asarray(scale, np.float32)),
                            np.atleast_1d(np.asarray(zero_point, np.int32)),
                            -1 if axis is None else axis % x.ndim,
                            np.dtype(dtype) == np.int8)


def fake_quant_arrays(x, scale, zero_point, dtype, axis=None):
    """(dequantize(quantize(x)), inside mask) of the array x: the STE's forward."""
    if x.dtype == np.float32:
        return _fake_quant_native(x, scale, zero_point, dtype, axis)
    y, _, inside, _ = _fake_quant(x, scale, zero_point, dtype, axis)
    return y, inside


class FakeQuantizeSTE(StraightThrough):
    """x (...) -> dequantize(quantize(x)); scale, zero_point scalars or (C,) on `axis`."""

    def forward(self, x, scale=None, zero_point=None, dtype=None, axis=None):
        y, self.mask = fake_quant_arrays(x, scale, zero_point, dtype, axis)
        return y


class LSQFunction(Function):
    """(x, scale) -> fake-quantized x with a learned scale (per tensor or per channel)."""

    def forward(self, x, scale, zero_point=None, dtype=None, axis=None, grad_scale=1.0):
        scale = np.maximum(scale, 1e-12)
        self.axis, self.grad_scale, self.scale_shape = axis, grad_scale, scale.shape
        self.native = x.dtype == np.float32 and scale.dtype == np.float32
        if self.native:  # y and the mask in one pass; the backward recomputes the rest
            y, self.inside = _fake_quant_native(x, scale, zero_point, dtype, axis)
            self.x, self.y, self.scale = x, y, np.atleast_1d(scale)
            return y
        y, self.level, self.inside, _ = _fake_quant(x, scale, zero_point, dtype, axis)
        self.ratio = x / scale.reshape(_shape(x.ndim, axis))
        return y

    def backward(self, g):
        native = self.native
        if native:  # the forward kept no level or ratio for the numpy path
            g = np.ascontiguousarray(g, np.float32)
        dx = None
        if self.needs_input_grad[0]:
            dx = pass_grad(g, self.inside)
        if not self.needs_input_grad[1]:
            return dx, None
        if native:  # sums in double, as the numpy below; in another order
            axis = -1 if self.axis is None else self.axis % g.ndim
            ds = _C.lsq_scale_grad(g, self.x, self.y, self.inside, self.scale, axis)
        else:
            local = self.level - np.where(self.inside, self.ratio, 0.0)
            axes = tuple(i for i in range(g.ndim) if self.axis is None or i != self.axis)
            ds = (g * local).sum(axis=axes)
        ds = ds.reshape(self.scale_shape) * self.grad_scale
        return dx, ds.astype(g.dtype)


class FakeQuantize(Module):
    """STE fake quantization with the observer's current (scale, zero point)."""

    def __init__(self, enabled=True):
        super().__init__()
        self.enabled = enabled

    def qparams(self, observer):
        return observer.qparams()

    def forward(self, x, observer):
        if not self.enabled:
            return x
        p = self.qparams(observer)
        return FakeQuantizeSTE.apply(x, scale=p.scale, zero_point=p.zero_point, dtype=p.dtype,
                                     axis=p.axis)

    def straight_through(self, observer):
        """forward(observer(x), observer) as an ObservedFakeQuant, for an op that runs it as
        the last step of its own autograd node (F.batch_norm's ste); None where disabled or
        where a subclass has a forward of its own (LSQ's, whose scale learns)."""
        if not self.enabled or type(self).forward is not FakeQuantize.forward:
            return None
        return ObservedFakeQuant(self, observer)

    def extra_repr(self):
        return f"enabled={self.enabled}"


class ObservedFakeQuant:
    """A FakeQuantize and its observer as functions of arrays, for an op that fake-quantizes
    its output in its own node: ``self(x) -> (out, gradient mask)``, the observer seeing x
    first; and, where the observer takes a range per tensor (`by_range`, from
    Observer.observes_range), the `from_range` form, for an op that knows its output's min and
    max before writing it (F.batch_norm's, from the channels' extremes) and fake-quantizes as
    it writes."""

    def __init__(self, fake_quant, observer):
        self.fake_quant, self.observer = fake_quant, observer
        self.qparams = None  # those of the last call, for the output's mark
        observes_range = getattr(observer, "observes_range", None)
        self.by_range = observes_range is not None and bool(observes_range())

    def __call__(self, x):
        seen = self.observer(Tensor(x))
        x = seen.data if isinstance(seen, Tensor) else np.asarray(seen)
        p = self.qparams = self.fake_quant.qparams(self.observer)
        return fake_quant_arrays(x, p.scale, p.zero_point, p.dtype, p.axis)

    def from_range(self, lo, hi):
        """The observer takes (lo, hi), float32 min and max of the data; then the per-tensor
        (scale, qmin - zero point, qmax - zero point) of the fake quantization, as floats."""
        if self.observer.active():
            self.observer.observe_range(np.float32(lo), np.float32(hi))
        p = self.qparams = self.fake_quant.qparams(self.observer)
        if p.axis is not None or np.size(p.scale) != 1:
            raise ValueError(f"{type(self.observer).__name__}: from_range needs per-tensor "
                             f"qparams, got axis {p.axis}")
        qmin, qmax = R.qrange(p.dtype)
        zp = int(np.asarray(p.zero_point).reshape(()))
        return float(np.asarray(p.scale, np.float32).reshape(())), float(qmin - zp), \
            float(qmax - zp)


class LSQFakeQuantize(FakeQuantize):
    """Learned step size: `scale` is a Parameter, set from the observer the first time data
    passes (then the observer only watches); the zero point stays where it was set."""

    def __init__(self, enabled=True):
        super().__init__(enabled)
        self.scale = Parameter(np.zeros((0,), np.float32))
        self.register_buffer("zero_point", None)

    @property
    def initialised(self):
        return self.scale.data.size > 0

    def qparams(self, observer):
        if not self.initialised:
            p = observer.qparams()
            self.scale.data = np.atleast_1d(p.scale).astype(np.float32)
            self.zero_point = np.atleast_1d(p.zero_point).astype(np.int64)
        per_channel = observer.ch_axis is not None
        scale = np.maximum(self.scale.data, 1e-12).astype(np.float32)
        zp = self.zero_point.data
        return QParams(scale if per_channel else scale.reshape(()),
                       zp if per_channel else zp.reshape(()), observer.dtype, observer.ch_axis)

    def forward(self, x, observer):
        if not self.enabled:
            return x
        p = self.qparams(observer)
        scale = self.scale if p.axis is not None else self.scale.reshape(())
        qmax = R.qrange(p.dtype)[1]
        per_scale = x.size // max(scale.size, 1)
        return LSQFunction.apply(x, scale, zero_point=p.zero_point, dtype=p.dtype, axis=p.axis,
                                 grad_scale=1.0 / np.sqrt(per_scale * qmax))
