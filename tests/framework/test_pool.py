import math

import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from helpers import check_op, each_isa
from tianyuan import _C
from tianyuan.functional.pooling import pool_out_size
from tianyuan.ops.pool_ref import (adaptive_avg_pool2d_backward_ref, adaptive_avg_pool2d_ref,
                                   avg_pool2d_backward_ref, avg_pool2d_ref,
                                   max_pool2d_backward_ref, max_pool2d_ref)


def _out_size(n, k, s, p, d, ceil_mode):
    """Output length written out from the definition: windows that start inside the input
    or its left padding, the last partial one only in ceil_mode."""
    span = (n + 2 * p - d * (k - 1) - 1) / s
    out = (math.ceil(span) if ceil_mode else math.floor(span)) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def max_pool_ref(x, k, s, p, d=1, ceil_mode=False):
    n, c, h, w = x.shape
    oh = _out_size(h, k[0], s[0], p[0], d, ceil_mode)
    ow = _out_size(w, k[1], s[1], p[1], d, ceil_mode)
    out = np.full((n, c, oh, ow), -np.inf, x.dtype)
    for y in range(oh):
        for z in range(ow):
            for i in range(k[0]):
                for j in range(k[1]):
                    r, q = y * s[0] - p[0] + i * d, z * s[1] - p[1] + j * d
                    if 0 <= r < h and 0 <= q < w:
                        out[:, :, y, z] = np.maximum(out[:, :, y, z], x[:, :, r, q])
    return out


def avg_pool_ref(x, k, s, p, ceil_mode=False, count_include_pad=True):
    n, c, h, w = x.shape
    oh = _out_size(h, k[0], s[0], p[0], 1, ceil_mode)
    ow = _out_size(w, k[1], s[1], p[1], 1, ceil_mode)
    out = np.zeros((n, c, oh, ow), x.dtype)
    for y in range(oh):
        for z in range(ow):
            r0, q0 = y * s[0] - p[0], z * s[1] - p[1]
            r1, q1 = min(r0 + k[0], h + p[0]), min(q0 + k[1], w + p[1])
            window = x[:, :, max(r0, 0):min(r1, h), max(q0, 0):min(q1, w)]
            count = (r1 - r0) * (q1 - q0) if count_include_pad else window[0, 0].size
            out[:, :, y, z] = window.sum(axis=(2, 3)) / count
    return out


def adaptive_ref(x, oh, ow):
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow), x.dtype)
    for y in range(oh):
        for z in range(ow):
            r0, r1 = (y * h) // oh, math.ceil((y + 1) * h / oh)
            q0, q1 = (z * w) // ow, math.ceil((z + 1) * w / ow)
            out[:, :, y, z] = x[:, :, r0:r1, q0:q1].mean(axis=(2, 3))
    return out


# shape, kernel, stride, padding, dilation, ceil_mode
MAX_CASES = [
    ((2, 3, 4, 4), (2, 2), (2, 2), (0, 0), 1, False),
    ((1, 2, 7, 6), (3, 3), (2, 2), (1, 1), 1, False),
    ((1, 2, 7, 7), (2, 2), (2, 2), (0, 0), 1, True),
    ((1, 1, 6, 5), (3, 3), (2, 2), (1, 1), 1, True),
    ((1, 1, 5, 4), (2, 2), (2, 2), (1, 1), 1, True),   # last ceil window dropped (rows)
    ((1, 2, 7, 8), (3, 2), (1, 2), (1, 0), 2, False),  # dilation, rectangular
    ((1, 1, 5, 5), (3, 3), (3, 3), (1, 1), 2, True),
    ((3, 5, 1, 1), (1, 1), (1, 1), (0, 0), 1, False),
    ((2, 3, 9, 70), (3, 3), (2, 2), (1, 1), 1, False),  # output rows past one vector
    ((1, 2, 5, 101), (3, 3), (2, 2), (1, 1), 2, True),  # stride 2, dilated, 3 vectors + 2
]


@pytest.mark.parametrize("shape,k,s,p,d,ceil_mode", MAX_CASES)
def test_max_pool2d(shape, k, s, p, d, ceil_mode):
    check_op(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode),
             lambda x: max_pool_ref(x, k, s, p, d, ceil_mode), [shape])


@pytest.mark.parametrize("shape,k,s,p,d,ceil_mode", MAX_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_max_pool_matches_numpy_twin(shape, k, s, p, d, ceil_mode, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    x.reshape(-1)[::7] = np.nan  # NaN propagates and wins the argmax
    flat = x.reshape(-1)
    flat[1::2] = flat[0:flat.size - 1:2]  # ties with the left neighbour: the first max wins
    out_size = tuple(pool_out_size(n, kk, ss, pp, d, ceil_mode)
                     for n, kk, ss, pp in zip(shape[2:], k, s, p))
    args = (k, s, p, (d, d), out_size)
    ref_out, ref_arg = max_pool2d_ref(x, *args)
    g = rng.standard_normal(ref_out.shape).astype(dtype)
    for isa in each_isa():
        out, arg = _C.max_pool2d(x, *args)
        np.testing.assert_array_equal(out, ref_out, err_msg=isa)
        np.testing.assert_array_equal(arg, ref_arg, err_msg=isa)
        # the inference kernel (no argmax, separable) gives the same values, NaN and all
        np.testing.assert_array_equal(_C.max_pool2d_values(x, *args), ref_out, err_msg=isa)
        np.testing.assert_allclose(_C.max_pool2d_backward(g, arg, shape),
                                   max_pool2d_backward_ref(g, arg, shape), rtol=1e-6,
                                   err_msg=isa)


def test_native_max_pool_rejects_bad_arguments():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="max_pool2d: x must be float32 or float64"):
        _C.max_pool2d(x.astype(np.int64), (2, 2), (2, 2), (0, 0), (1, 1), (2, 2))
    with pytest.raises(ValueError, match=r"max_pool2d: kernel \(2, 2\), stride \(0, 2\).*>= 1"):
        _C.max_pool2d(x, (2, 2), (0, 2), (0, 0), (1, 1), (2, 2))
    with pytest.raises(ValueError, match="max_pool2d_backward: argmax must have grad's shape"):
        _C.max_pool2d_backward(np.zeros((1, 1, 2, 2), np.float32),
                               np.zeros((1, 1, 2, 3), np.int32), (1, 1, 4, 4))


def test_max_pool2d_takes_the_values_kernel_only_without_a_backward(monkeypatch):
    calls = []
    values = _C.max_pool2d_values
    monkeypatch.setattr(_C, "max_pool2d_values", lambda *a: calls.append(1) or values(*a))
    x = ty.randn(1, 2, 6, 6)
    with ty.no_grad():
        F.max_pool2d(ty.tensor(x.numpy(), requires_grad=True), 2)
    F.max_pool2d(x, 2)  # needs no gradient
    assert len(calls) == 2
    F.max_pool2d(ty.tensor(x.numpy(), requires_grad=True), 2).sum().backward()
    assert len(calls) == 2


def test_max_pool2d_gradient_goes_to_first_argmax_and_stride_defaults_to_kernel():
    x = ty.tensor([[[[1.0, 3.0], [3.0, 2.0]]]], requires_grad=True)
    F.max_pool2d(x, 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[[[0, 1], [0, 0]]]])


# shape, kernel, stride, padding, ceil_mode, count_include_pad
AVG_CASES = [
    ((2, 3, 4, 4), (2, 2), (2, 2), (0, 0), False, True),
    ((1, 2, 5, 6), (3, 3), (2, 2), (1, 1), False, True),
    ((1, 2, 5, 6), (3, 3), (2, 2), (1, 1), False, False),
    ((1, 1, 7, 7), (2, 2), (2, 2), (0, 0), True, True),
    ((1, 2, 6, 5), (3, 2), (2, 3), (1, 1), True, True),
    ((1, 2, 6, 5), (3, 2), (2, 3), (1, 1), True, False),
]


@pytest.mark.parametrize("shape,k,s,p,ceil_mode,include", AVG_CASES)
def test_avg_pool2d(shape, k, s, p, ceil_mode, include):
    check_op(lambda x: F.avg_pool2d(x, k, s, p, ceil_mode, include),
             lambda x: avg_pool_ref(x, k, s, p, ceil_mode, include), [shape])


@pytest.mark.parametrize("shape,k,s,p,ceil_mode,include", AVG_CASES + [
    ((2, 19, 9, 37), (3, 3), (1, 1), (1, 1), False, False),  # rows past one vector
    ((1, 3, 1, 1), (3, 3), (2, 2), (1, 1), True, True)])     # a 1x1 image
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_avg_pools_match_numpy_twins_on_every_isa(shape, k, s, p, ceil_mode, include,
                                                         dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(dtype)
    out_size = tuple(pool_out_size(n, kk, ss, pp, 1, ceil_mode)
                     for n, kk, ss, pp in zip(shape[2:], k, s, p))
    want = avg_pool2d_ref(x, k, s, p, out_size, include)
    g = rng.standard_normal(want.shape).astype(dtype)
    want_gx = avg_pool2d_backward_ref(g, shape, k, s, p, include)
    adaptive = (max(1, shape[2] // 2), shape[3] + 1)  # shrinking and growing windows
    want_a = adaptive_avg_pool2d_ref(x, adaptive)
    ga = rng.standard_normal(want_a.shape).astype(dtype)
    want_ga = adaptive_avg_pool2d_backward_ref(ga, shape)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    for isa in each_isa():
        np.testing.assert_allclose(_C.avg_pool2d(x, k, s, p, out_size, include), want,
                                   err_msg=isa, **tol)
        np.testing.assert_allclose(_C.avg_pool2d_backward(g, shape, k, s, p, include), want_gx,
                                   err_msg=isa, **tol)
        np.testing.assert_allclose(_C.adaptive_avg_pool2d(x, adaptive), want_a, err_msg=isa,
                                   **tol)
        np.testing.assert_allclose(_C.adaptive_avg_pool2d_backward(ga, shape), want_ga,
                                   err_msg=isa, **tol)


def test_native_avg_pool_rejects_bad_arguments():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="avg_pool2d: height padding .* at most half the kernel"):
        _C.avg_pool2d(x, (2, 2), (1, 1), (2, 0), (3, 3), True)
    with pytest.raises(ValueError, match="avg_pool2d_backward: grad must be"):
        _C.avg_pool2d_backward(np.zeros((2, 1, 2, 2), np.float32), (1, 1, 4, 4), (2, 2),
                               (2, 2), (0, 0), True)
    with pytest.raises(ValueError, match="adaptive_avg_pool2d: x must be float32"):
        _C.adaptive_avg_pool2d(x.astype(np.int64), (2, 2))


def test_avg_pool2d_ceil_edge_is_not_counted():
    # PyTorch: windows are clipped to input + padding before counting, so the ceil_mode
    # edge window of a 3x3 input (k=2, s=2) averages one pixel, not four
    out = F.avg_pool2d(ty.ones(1, 1, 3, 3), 2, ceil_mode=True)
    np.testing.assert_array_equal(out.numpy(), np.ones((1, 1, 2, 2)))
    out = F.avg_pool2d(ty.ones(1, 1, 2, 2), 3, 1, 1, count_include_pad=True)
    np.testing.assert_allclose(out.numpy()[0, 0], [[4 / 9, 4 / 9], [4 / 9, 4 / 9]], rtol=1e-6)


@pytest.mark.parametrize("shape,out", [((2, 3, 5, 7), (3, 2)), ((1, 2, 4, 4), (1, 1)),
                                       ((1, 2, 3, 3), (5, 4)), ((1, 1, 6, 6), (3, 3))])
def test_adaptive_avg_pool2d(shape, out):
    check_op(lambda x: F.adaptive_avg_pool2d(x, out), lambda x: adaptive_ref(x, *out), [shape])


def test_adaptive_avg_pool2d_int_and_none():
    x = ty.randn(1, 2, 5, 6)
    assert F.adaptive_avg_pool2d(x, 2).shape == (1, 2, 2, 2)
    assert F.adaptive_avg_pool2d(x, (None, 3)).shape == (1, 2, 5, 3)


def test_pool_errors():
    x = ty.randn(1, 2, 5, 5)
    with pytest.raises(ValueError, match="max_pool2d: padding .* at most half"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match="avg_pool2d: kernel_size must be >= 1"):
        F.avg_pool2d(x, 0)
    with pytest.raises(ValueError, match="max_pool2d: output size"):
        F.max_pool2d(x, 6)
    with pytest.raises(ValueError, match=r"max_pool2d: input must be 4-D .* got shape \(2, 5, 5\)"):
        F.max_pool2d(ty.randn(2, 5, 5), 2)
    with pytest.raises(TypeError, match="avg_pool2d: input must be float32 or float64"):
        F.avg_pool2d(ty.zeros(1, 1, 4, 4, dtype="int64"), 2)
    with pytest.raises(ValueError, match="adaptive_avg_pool2d: output_size must be >= 1"):
        F.adaptive_avg_pool2d(x, 0)
