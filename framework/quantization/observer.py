"""Observers: watch a tensor, keep its range, turn the range into (scale, zero point).

An observer is a Module. It records statistics when it is *active*: by default in
training mode only (`enabled=None`); `enable_observer`/`disable_observer` force it on or
off (calibration runs an eval-mode model with observers forced on).

Range -> quantization parameters (`qparams_from_range`), with 0 always representable:

- symmetric: ``scale = max(|min|, |max|) / 127`` (int8, zero point 0; uint8, zero point 128),
  so the int8 grid is [-127, 127] and weights never use -128; with `reduce_range`, ``/ 63``:
  the 7-bit grid [-63, 63] (ONNX Runtime's `reduce_range`), which AVX2 CPUs without VNNI
  convolve faster (`packing.PackedWeight.narrow`) at half the weights' resolution;
- asymmetric: ``scale = (max - min) / (qmax - qmin)``, ``zp = qmin - round(min / scale)``.

Per channel when `ch_axis` is set (weights: axis 0, one scale per output channel).

>>> import tianyuan as ty
>>> obs = MinMaxObserver(dtype="uint8", enabled=True)
>>> _ = obs(ty.tensor([-1.0, 0.5, 3.0]))
>>> p = obs.qparams()
>>> float(p.scale), int(p.zero_point)
(0.01568627543747425, 64)
"""
from collections import namedtuple

import numpy as np

from .. import _C
from ..nn.module import Module
from ..tensor import Tensor
from .reference import qrange

QParams = namedtuple("QParams", ["scale", "zero_point", "dtype", "axis"])
EPS = float(np.finfo(np.float32).eps)


def qparams_from_range(lo, hi, dtype, symmetric, axis=None, eps=EPS, reduce_range=False):
    """Range arrays (C,) or scalars -> QParams(scale float32, zero_point int64, dtype, axis).
    reduce_range (symmetric only): the grid [-63, 63] instead of [-127, 127]."""
    dtype = np.dtype(dtype)
    qmin, qmax = qrange(dtype)
    if reduce_range and not symmetric:
        raise ValueError("qparams_from_range: reduce_range needs symmetric=True")
    lo = np.minimum(np.asarray(lo, np.float64), 0.0)
    hi = np.maximum(np.asarray(hi, np.float64), 0.0)
    if symmetric:
        scale = np.maximum(np.maximum(-lo, hi) / (63.0 if reduce_range else 127.0), eps)
        zero_point = np.full(scale.shape, 0 if qmin < 0 else 128, np.int64)
    else:
        scale = np.maximum((hi - lo) / float(qmax - qmin), eps)
        zero_point = np.clip(qmin - np.rint(lo / scale), qmin, qmax).astype(np.int64)
    return QParams(scale.astype(np.float32), zero_point, dtype, axis)


class Observer(Module):
    """Base class: subclasses implement `observe(array)` and `range()` -> (lo, hi).

    dtype: 'uint8' or 'int8'; symmetric: scale from max |x|; ch_axis: None (per tensor)
    or the channel axis (per channel); reduce_range (symmetric only): the 7-bit grid
    [-63, 63].
    """

    def __init__(self, dtype="uint8", symmetric=False, ch_axis=None, enabled=None, eps=EPS,
                 reduce_range=False):
        super().__init__()
        self.dtype_name, self.symmetric, self.ch_axis = str(np.dtype(dtype)), symmetric, ch_axis
        qrange(self.dtype)
        if reduce_range and not symmetric:
            raise ValueError(f"{type(self).__name__}: reduce_range needs symmetric=True")
        self.reduce_range = bool(reduce_range)
        self.enabled, self.eps = enabled, eps
        self.register_buffer("min_val", None)
        self.register_buffer("max_val", None)

    @property
    def dtype(self):
        # kept by name: deepcopy of an np.dtype is not the singleton the native code expects
        return np.dtype(self.dtype_name)

    def active(self):
        return self.training if self.enabled is None else bool(self.enabled)

    def forward(self, x):
        if self.active():
            self.observe(np.asarray(x.data if isinstance(x, Tensor) else x, np.float32))
        return x

    def observe(self, x):
        raise NotImplementedError(f"{type(self).__name__}: observe() is not implemented")

    def observes_range(self):
        """Whether, per tensor, observe(x) is observe_range(min(x), max(x)) (so an op that
        knows its output's range may call that instead): where the class that defines
        observe() defines observe_range() beside it, and forward() is this class's."""
        cls = type(self)
        if self.ch_axis is not None or cls.forward is not Observer.forward:
            return False
        owner = next(k for k in cls.__mro__ if "observe" in k.__dict__)
        return "observe_range" in owner.__dict__

    def _reduce(self, x):
        """x (...) -> (min, max): scalars, or (C,) along ch_axis."""
        if self.ch_axis is None:  # one native pass where numpy takes two, on one core
            lo, hi = _C.min_max(x) if x.size and x.dtype == np.float32 else (x.min(), x.max())
            return np.float32(lo), np.float32(hi)
        axis = self.ch_axis % x.ndim
        if axis == 0 and x.size and x.dtype == np.float32:  # weights: one native call
            return _C.min_max_rows(np.ascontiguousarray(x).reshape(x.shape[0], -1))
        axes = tuple(i for i in range(x.ndim) if i != axis)
        return x.min(axis=axes), x.max(axis=axes)

    def _set_range(self, lo, hi):
        self.min_val = Tensor(np.asarray(lo, np.float32))
        self.max_val = Tensor(np.asarray(hi, np.float32))

    @property
    def observed(self):
        return self.min_val is not None

    def range(self):
        """(lo, hi) float arrays; raises if nothing was observed."""
        if not self.observed:
            raise RuntimeError(f"{type(self).__name__}: no statistics yet; run data through the "
                               "model in training mode or with quantization.calibrate() first")
        return self.min_val.data, self.max_val.data

    def qparams(self):
        lo, hi = self.range()
        return qparams_from_range(lo, hi, self.dtype, self.symmetric, self.ch_axis, self.eps,
                                  self.reduce_range)

    def extra_repr(self):
        return (f"dtype={self.dtype}, symmetric={self.symmetric}, ch_axis={self.ch_axis}, "
                f"enabled={self.enabled}" + (", reduce_range=True" if self.reduce_range else ""))


class MinMaxObserver(Observer):
    """Running min and max over everything seen (memoryless=True: the last batch only,
    right for weights, which change every step). current=True (memoryless; the weights'
    observer): active in eval mode too unless disabled, so the range is always that of the
    weights as they are now: after the last optimizer step a stale range would clip them
    (onto -128, or past the 7-bit grid with reduce_range) in QAT eval and in the int8
    model alike."""

    def __init__(self, memoryless=False, current=False, **kwargs):
        super().__init__(**kwargs)
        if current and not memoryless:
            raise ValueError("MinMaxObserver: current=True needs memoryless=True")
        self.memoryless, self.current = memoryless, current

    def active(self):
        return True if self.current and self.enabled is None else super().active()

    def observe(self, x):
        self.observe_range(*self._reduce(x))

    def observe_range(self, lo, hi):
        """observe() of data whose min and max (per tensor: float32 scalars) are lo, hi."""
        if self.observed and not self.memoryless:
            lo, hi = np.minimum(lo, self.min_val.data), np.maximum(hi, self.max_val.data)
        self._set_range(lo, hi)


class MovingAverageMinMaxObserver(Observer):
    """EMA of the batch min and max; the first batch sets them (momentum as MegEngine:
    new = momentum * old + (1 - momentum) * batch)."""

    def __init__(self, momentum=0.9, **kwargs):
        super().__init__(**kwargs)
        self.momentum = float(momentum)

    def observe(self, x):
        self.observe_range(*self._reduce(x))

    def observe_range(self, lo, hi):
        """observe() of data whose min and max (per tensor: float32 scalars) are lo, hi."""
        if self.observed:
            m = self.momentum
            lo = m * self.min_val.data + (1 - m) * lo
            hi = m * self.max_val.data + (1 - m) * hi
        self._set_range(lo, hi)


def make_weight_observer(**kwargs):
    """The default weight observer: per-channel (axis 0) symmetric int8 min/max of the
    current weights, in eval mode too (reduce_range=True: on the 7-bit grid [-63, 63])."""
    kwargs.setdefault("dtype", "int8")
    kwargs.setdefault("symmetric", True)
    kwargs.setdefault("ch_axis", 0)
    return MinMaxObserver(memoryless=True, current=True, **kwargs)

