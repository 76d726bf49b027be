"""Elementwise primitives. Binary ops broadcast; their backward sums over broadcast axes."""
import numpy as np

from .. import _C
from ..autograd import Function


def unbroadcast(grad, shape):
    """Sum `grad` down to `shape`, undoing numpy broadcasting."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad


class _Binary(Function):
    def forward(self, a, b):
        self.a_shape, self.b_shape = a.shape, b.shape
        return self.compute(a, b)


class Add(_Binary):
    def compute(self, a, b):
        return a + b

    def backward(self, g):
        return unbroadcast(g, self.a_shape), unbroadcast(g, self.b_shape)


class Sub(_Binary):
    def compute(self, a, b):
        return a - b

    def backward(self, g):
        return unbroadcast(g, self.a_shape), unbroadcast(-g, self.b_shape)


class Mul(_Binary):
    def compute(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, g):
        ga = unbroadcast(g * self.b, self.a_shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(g * self.a, self.b_shape) if self.needs_input_grad[1] else None
        return ga, gb


class Div(_Binary):
    def compute(self, a, b):
        self.a, self.b = a, b
        return a / b

    def backward(self, g):
        ga = unbroadcast(g / self.b, self.a_shape) if self.needs_input_grad[0] else None
        gb = None
        if self.needs_input_grad[1]:
            gb = unbroadcast(-g * self.a / (self.b * self.b), self.b_shape)
        return ga, gb


class Pow(_Binary):
    def compute(self, a, b):
        self.a, self.b = a, b
        self.out = np.power(a, b)
        return self.out

    def backward(self, g):
        ga = gb = None
        if self.needs_input_grad[0]:
            with np.errstate(divide="ignore", invalid="ignore"):
                slope = self.b * np.power(self.a, self.b - 1)
            # a ** 0 is 1 for every a: slope 0, also at a = 0 (0 * 0 ** -1 would be NaN; a
            # focal loss with gamma = 0 had NaN gradients where a logit saturated)
            slope = np.where(self.b == 0, np.zeros((), slope.dtype), slope)
            ga = unbroadcast(g * slope, self.a_shape)
        if self.needs_input_grad[1]:
            safe_log = np.log(np.where(self.a > 0, self.a, 1))
            gb = unbroadcast(g * self.out * safe_log, self.b_shape)
        return ga, gb


class Maximum(_Binary):
    """Ties send half the gradient to each side (keeps max symmetric)."""

    def compute(self, a, b):
        self.a, self.b = a, b
        return np.maximum(a, b)

    def backward(self, g):
        share = np.where(self.a > self.b, 1.0, np.where(self.a == self.b, 0.5, 0.0)).astype(g.dtype)
        return unbroadcast(g * share, self.a_shape), unbroadcast(g * (1 - share), self.b_shape)


class Where(Function):
    """where(cond, a, b); `cond` is a bool tensor and gets no gradient."""

    def forward(self, cond, a, b):
        self.cond, self.a_shape, self.b_shape = cond, a.shape, b.shape
        return np.where(cond, a, b)

    def backward(self, g):
        zero = np.zeros((), g.dtype)
        return (None, unbroadcast(np.where(self.cond, g, zero), self.a_shape),
                unbroadcast(np.where(self.cond, zero, g), self.b_shape))


class Neg(Function):
    def forward(self, x):
        return -x

    def backward(self, g):
        return -g


class Exp(Function):
    def forward(self, x):
        self.out = np.exp(x)
        return self.out

    def backward(self, g):
        return g * self.out


class Log(Function):
    def forward(self, x):
        self.x = x
        return np.log(x)

    def backward(self, g):
        return g / self.x


class Sqrt(Function):
    def forward(self, x):
        self.out = np.sqrt(x)
        return self.out

    def backward(self, g):
        return g / (2 * self.out)


class Abs(Function):
    def forward(self, x):
        self.sign = np.sign(x)
        return np.abs(x)

    def backward(self, g):
        return g * self.sign


class Clip(Function):
    """Gradient passes where lo <= x <= hi."""

    def forward(self, x, lo=None, hi=None):
        self.mask = np.ones(x.shape, bool)
        if lo is not None:
            self.mask &= x >= lo
        if hi is not None:
            self.mask &= x <= hi
        return np.clip(x, lo, hi)

    def backward(self, g):
        return g * self.mask


def clamp_ref(x, lo, hi):
    """Numpy twin of _C.clamp (framework/csrc/norm/clamp.h): NaN passes through."""
    lo, hi = x.dtype.type(lo), x.dtype.type(hi)
    return np.where(x < lo, lo, np.where(x > hi, hi, x))


def clamp_grad_ref(g, y, lo, hi):
    """Numpy twin of _C.clamp_backward: g where lo < y < hi (y: the clamp's output)."""
    return np.where((y > lo) & (y < hi), g, np.zeros((), g.dtype))


class Clamp(Function):
    """min(max(x, lo), hi) for the activations (ReLU: 0, inf; ReLU6: 0, 6). The gradient is
    taken from the output (g where lo < y < hi), so no mask is kept; float32 runs natively
    (one pass on every core, not numpy's single-threaded compare + where; bench/RESULTS.md,
    training)."""

    def forward(self, x, lo=0.0, hi=np.inf):
        self.lo, self.hi = lo, hi
        native = x.dtype == np.float32
        self.y = _C.clamp(x, lo, hi) if native else clamp_ref(x, lo, hi)
        return self.y

    def backward(self, g):
        if g.dtype == np.float32 and self.y.dtype == np.float32:
            return _C.clamp_backward(g, self.y, self.lo, self.hi)
        return clamp_grad_ref(g, self.y, self.lo, self.hi)


class AddClamp(Function):
    """clamp(a + b, lo, hi) for float32 a and b of one shape: a residual add and its ReLU in
    one native pass, the same bits as Add then Clamp; the gradient of both inputs is the
    clamp's (from the output)."""

    def forward(self, a, b, lo=0.0, hi=np.inf):
        self.lo, self.hi = lo, hi
        self.y = _C.add_clamp(a, b, lo, hi)
        return self.y

    def backward(self, g):
        gx = _C.clamp_backward(np.ascontiguousarray(g, np.float32), self.y, self.lo, self.hi)
        return gx, gx


class Sigmoid(Function):
    def forward(self, x):
        # split by sign so exp never overflows
        e = np.exp(-np.abs(x))
        self.out = np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
        return self.out

    def backward(self, g):
        return g * self.out * (1 - self.out)


class Tanh(Function):
    def forward(self, x):
        self.out = np.tanh(x)
        return self.out

    def backward(self, g):
        return g * (1 - self.out * self.out)


def pass_grad(g, mask):
    """g where mask (bool or bytes of g's shape), else 0: a straight-through estimator's
    gradient; float32 natively, in parallel (numpy's g * mask runs on one core)."""
    if g.dtype == np.float32:
        return _C.masked_grad(np.ascontiguousarray(g), mask)
    return g * mask


class StraightThrough(Function):
    """fn(x) -> (y, mask) on arrays, with the gradient taken as 1 where mask and 0 elsewhere:
    the straight-through estimator with clipping (fake quantization's, whose rounding has no
    useful derivative)."""

    def forward(self, x, fn=None):
        y, self.mask = fn(x)
        return y

    def backward(self, g):
        return pass_grad(g, self.mask)
