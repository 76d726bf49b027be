"""Graph-building backwards: each primitive's gradient written with differentiable tensor
ops, so `autograd.grad(..., create_graph=True)` returns gradients that back-propagate again
(WGAN-GP's gradient penalty, Gulrajani et al. 2017). The numpy `backward` of each Function
stays the default and the fast path; these rules run only under create_graph.

A rule takes the op's Function (its saved attributes and `needs_input_grad`), the output's
gradient `g` (a Tensor) and the op's input Tensors, and returns one Tensor (or None) per
input. Where a gradient is piecewise constant in the inputs (ReLU's mask, max's ties) the
constant is taken from the saved arrays. An op with no rule raises, naming itself.

Convolution: the input gradient is the transposed convolution of g (as PyTorch computes it);
the weight gradient is a convolution of the input with g, batch and channels swapped:
    gw[o, c, i, j] = sum_n,p,q g[n, o, p, q] * x_pad[n, c, p*s + i*d, q*s + j*d]
is conv2d(x^T (C, N, H, W), g^T (O, N, oh, ow), stride=d, dilation=s) -> (C, O, kh', kw'),
cropped to (kh, kw) and transposed.

>>> x = ty.tensor([[1.0, 2.0]], requires_grad=True)
>>> (gx,) = ty.autograd.grad((x * x * x).sum(), x, create_graph=True)   # 3 x^2
>>> ty.autograd.grad(gx.sum(), x)[0].numpy()                              # 6 x
array([[ 6., 12.]], dtype=float32)
"""
import numpy as np

from ..ops import activation as A
from ..ops import conv as C
from ..ops import elementwise as E
from ..ops import linalg as L
from ..ops import misc
from ..ops import pool as P
from ..ops import reduce as R
from ..ops import shape as S
from ..tensor import Tensor
from . import math as M

RULES = {}


def rule(*functions):
    """Registers a graph-building backward for these Function classes (loud on duplicates)."""
    def register(fn):
        for function in functions:
            if function in RULES:
                raise ValueError(f"double_backward: {function.__name__} already has a rule")
            RULES[function] = fn
        return fn
    return register


def graph_backward(ctx, g):
    """The gradients of `ctx`'s inputs as Tensors with a graph, given the output's `g`."""
    fn = RULES.get(type(ctx))
    if fn is None:
        names = ", ".join(sorted(f.__name__ for f in RULES))
        raise RuntimeError(
            f"autograd.grad(create_graph=True): the op '{ctx.name}' has no graph-building "
            "backward, so its gradient cannot be differentiated again (a double backward "
            f"through it). Ops that have one: {names}. Add a rule for it in "
            "tianyuan/functional/double_backward.py, or take the gradient with "
            "create_graph=False.")
    grads = fn(ctx, g, *ctx.parents)
    return grads if isinstance(grads, tuple) else (grads,)


def sum_to(t, shape):
    """Sum `t` down to `shape`, undoing broadcasting (elementwise.unbroadcast on Tensors)."""
    shape = tuple(shape)
    if t.shape == shape:
        return t
    extra = t.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape)
                                       if n == 1 and t.shape[extra + i] != 1)
    return M.reshape(M.sum(t, axes), shape) if axes else M.reshape(t, shape)


def _const(array, like):
    return Tensor(np.asarray(array, dtype=like.dtype))


def _needs(ctx, i):
    return ctx.needs_input_grad[i]


# ---------------------------------------------------------------- elementwise

@rule(E.Add)
def _add(ctx, g, a, b):
    return (sum_to(g, a.shape) if _needs(ctx, 0) else None,
            sum_to(g, b.shape) if _needs(ctx, 1) else None)


@rule(E.Sub)
def _sub(ctx, g, a, b):
    return (sum_to(g, a.shape) if _needs(ctx, 0) else None,
            sum_to(-g, b.shape) if _needs(ctx, 1) else None)


@rule(E.Mul)
def _mul(ctx, g, a, b):
    return (sum_to(g * b, a.shape) if _needs(ctx, 0) else None,
            sum_to(g * a, b.shape) if _needs(ctx, 1) else None)


@rule(E.Div)
def _div(ctx, g, a, b):
    return (sum_to(g / b, a.shape) if _needs(ctx, 0) else None,
            sum_to(-g * a / (b * b), b.shape) if _needs(ctx, 1) else None)


@rule(E.Pow)
def _pow(ctx, g, a, b):
    ga = gb = None
    with np.errstate(divide="ignore", invalid="ignore"):
        if _needs(ctx, 0):
            slope = b * a ** (b - 1.0)
            if (b.data == 0).any():   # a ** 0 has slope 0 everywhere, also at a = 0
                slope = M.where(Tensor(b.data == 0), 0.0, slope)
            ga = sum_to(g * slope, a.shape)
        if _needs(ctx, 1):
            safe_log = M.log(M.where(Tensor(a.data > 0), a, 1.0))
            gb = sum_to(g * a ** b * safe_log, b.shape)
    return ga, gb


@rule(E.Maximum)
def _maximum(ctx, g, a, b):
    share = np.where(a.data > b.data, 1.0, np.where(a.data == b.data, 0.5, 0.0))
    return (sum_to(g * _const(share, g), a.shape) if _needs(ctx, 0) else None,
            sum_to(g * _const(1.0 - share, g), b.shape) if _needs(ctx, 1) else None)


@rule(E.Where)
def _where(ctx, g, cond, a, b):
    return (None,
            sum_to(M.where(cond, g, 0.0), a.shape) if _needs(ctx, 1) else None,
            sum_to(M.where(cond, 0.0, g), b.shape) if _needs(ctx, 2) else None)


@rule(E.Neg)
def _neg(ctx, g, x):
    return -g


@rule(E.Exp)
def _exp(ctx, g, x):
    return g * M.exp(x)


@rule(E.Log)
def _log(ctx, g, x):
    return g / x


@rule(E.Sqrt)
def _sqrt(ctx, g, x):
    return g / (M.sqrt(x) * 2.0)


@rule(E.Abs)
def _abs(ctx, g, x):
    return g * _const(np.sign(x.data), g)


@rule(E.Clip)
def _clip(ctx, g, x):
    return g * _const(ctx.mask, g)


@rule(E.Clamp)
def _clamp(ctx, g, x):
    return g * _const((ctx.y > ctx.lo) & (ctx.y < ctx.hi), g)   # ReLU's mask: constant


@rule(E.AddClamp)
def _add_clamp(ctx, g, a, b):
    gx = g * _const((ctx.y > ctx.lo) & (ctx.y < ctx.hi), g)
    return gx if _needs(ctx, 0) else None, gx if _needs(ctx, 1) else None


@rule(E.Sigmoid)
def _sigmoid(ctx, g, x):
    s = E.Sigmoid.apply(x)
    return g * s * (1.0 - s)


@rule(E.Tanh)
def _tanh(ctx, g, x):
    t = E.Tanh.apply(x)
    return g * (1.0 - t * t)


@rule(A.Softplus)
def _softplus(ctx, g, x):
    slope = E.Sigmoid.apply(x * ctx.beta)
    if ctx.linear is not None:
        slope = M.where(Tensor(ctx.linear), 1.0, slope)
    return g * slope


@rule(misc.Cast)
def _cast(ctx, g, x):
    return g.astype(ctx.dtype)


# ---------------------------------------------------------------- reductions and shapes

def _kept_shape(shape, axis):
    """`shape` with the reduced axes (all for None) kept as 1."""
    axes = range(len(shape)) if axis is None else np.atleast_1d(axis)
    return tuple(1 if i in set(int(a) for a in axes) else n for i, n in enumerate(shape))


@rule(R.Sum)
def _sum(ctx, g, x):
    return M.broadcast_to(M.reshape(g, _kept_shape(ctx.shape, ctx.axis)), ctx.shape)


@rule(R.Max)
def _max(ctx, g, x):
    mask = ctx.x == ctx.out
    share = mask / mask.sum(axis=ctx.axis, keepdims=True)           # ties split evenly
    return M.reshape(g, _kept_shape(x.shape, ctx.axis)) * _const(share, g)


@rule(S.Reshape)
def _reshape(ctx, g, x):
    return M.reshape(g, ctx.shape)


@rule(S.Permute)
def _permute(ctx, g, x):
    return M.permute(g, tuple(int(a) for a in ctx.inverse))


@rule(S.Expand)
def _expand(ctx, g, x):
    return sum_to(g, ctx.shape)


@rule(S.Pad)
def _pad(ctx, g, x):
    return g[ctx.slices]


@rule(S.GetItem)
def _getitem(ctx, g, x):
    return S.GetItemBackward.apply(g, shape=ctx.shape, index=ctx.index)


@rule(S.GetItemBackward)
def _getitem_backward(ctx, gg, g):
    return S.GetItem.apply(gg, index=ctx.index)


@rule(S.Concat)
def _concat(ctx, g, *xs):
    bounds = [0, *(int(b) for b in ctx.bounds), g.shape[ctx.axis]]
    lead = (slice(None),) * ctx.axis
    return tuple(g[lead + (slice(lo, hi),)] if _needs(ctx, i) else None
                 for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])))


# ---------------------------------------------------------------- products

@rule(L.Matmul)
def _matmul(ctx, g, a, b):
    a2 = M.reshape(a, (1,) + a.shape) if a.ndim == 1 else a      # 1-D operands promoted
    b2 = M.reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    if b.ndim == 1:
        g = M.reshape(g, g.shape + (1,))
    if a.ndim == 1:
        g = M.reshape(g, g.shape[:-1] + (1,) + g.shape[-1:])
    ga = gb = None
    if _needs(ctx, 0):
        ga = M.reshape(sum_to(M.matmul(g, M.transpose(b2, -1, -2)), a2.shape), a.shape)
    if _needs(ctx, 1):
        gb = M.reshape(sum_to(M.matmul(M.transpose(a2, -1, -2), g), b2.shape), b.shape)
    return ga, gb


def conv_weight_grad(x, g, kernel, stride, padding, dilation, groups):
    """The weight gradient (Co, C/groups, kh, kw) of conv2d(x (N, C, H, W)) at the output
    gradient g (N, Co, oh, ow), as differentiable ops (module docstring). With groups the
    product of every pair of groups is computed and the diagonal blocks kept."""
    from .conv import conv2d
    full = conv2d(M.permute(x, (1, 0, 2, 3)), M.permute(g, (1, 0, 2, 3)), stride=dilation,
                  padding=padding, dilation=stride)              # (C, Co, kh', kw')
    full = full[:, :, :kernel[0], :kernel[1]]
    if groups == 1:
        return M.permute(full, (1, 0, 2, 3))
    c, co = full.shape[:2]
    blocks = M.reshape(full, (groups, c // groups, groups, co // groups) + tuple(kernel))
    diagonal = blocks[np.arange(groups), :, np.arange(groups)]   # (G, C/G, Co/G, kh, kw)
    return M.reshape(M.permute(diagonal, (0, 2, 1, 3, 4)), (co, c // groups) + tuple(kernel))


@rule(C.Conv2d)
def _conv2d(ctx, g, x, w, b=None):
    from .conv import conv_transpose2d
    geo, groups = ctx.geo, ctx.groups
    gx = gw = gb = None
    if _needs(ctx, 0):
        (pt, pb, pl, pr), (sh, sw), (dh, dw) = geo.padding, geo.stride, geo.dilation
        kh, kw = geo.kernel
        extra = (x.shape[2] - ((g.shape[2] - 1) * sh - pt - pb + dh * (kh - 1) + 1),
                 x.shape[3] - ((g.shape[3] - 1) * sw - pl - pr + dw * (kw - 1) + 1))
        gx = conv_transpose2d(g, w, stride=geo.stride, padding=geo.padding, output_padding=extra,
                              groups=groups, dilation=geo.dilation)
    if _needs(ctx, 1):
        gw = conv_weight_grad(x, g, geo.kernel, geo.stride, geo.padding, geo.dilation, groups)
    if b is not None and _needs(ctx, 2):
        gb = M.sum(g, (0, 2, 3))
    return (gx, gw) if b is None else (gx, gw, gb)


@rule(C.ConvTranspose2d)
def _conv_transpose2d(ctx, g, x, w, b=None):
    from .conv import conv2d
    geo, groups = ctx.geo, ctx.groups
    inner = g[:, :, :ctx.inner[0], :ctx.inner[1]]               # the zero edge has no inputs
    gx = gw = gb = None
    if _needs(ctx, 0):
        gx = conv2d(inner, w, stride=geo.stride, padding=geo.padding, dilation=geo.dilation,
                    groups=groups)
    if _needs(ctx, 1):   # the weight gradient of the convolution this layer is the adjoint of
        gw = conv_weight_grad(inner, x, geo.kernel, geo.stride, geo.padding, geo.dilation,
                              groups)
    if b is not None and _needs(ctx, 2):
        gb = M.sum(g, (0, 2, 3))
    return (gx, gw) if b is None else (gx, gw, gb)


# ---------------------------------------------------------------- pooling

@rule(P.AvgPool2d)
def _avg_pool2d(ctx, g, x):
    return P.AvgPool2dBackward.apply(g, shape=ctx.shape, args=ctx.args)


@rule(P.AdaptiveAvgPool2d)
def _adaptive_avg_pool2d(ctx, g, x):
    return P.AdaptiveAvgPool2dBackward.apply(g, shape=ctx.shape)


@rule(P.AvgPool2dBackward)
def _avg_pool2d_backward(ctx, gg, g):
    kernel, stride, padding, count_include_pad = ctx.args
    return P.AvgPool2d.apply(gg, kernel=kernel, stride=stride, padding=padding,
                             out_size=tuple(ctx.out_size), count_include_pad=count_include_pad)


@rule(P.AdaptiveAvgPool2dBackward)
def _adaptive_avg_pool2d_backward(ctx, gg, g):
    return P.AdaptiveAvgPool2d.apply(gg, out_size=tuple(ctx.out_size))
