"""Fake quantizers: forward = reference quantize/dequantize; STE and LSQ gradients by hand
and against finite differences where they are defined."""
import numpy as np
import pytest

import tianyuan as ty
from helpers import each_isa
from tianyuan import _C
from tianyuan.quantization import LSQFunction, FakeQuantizeSTE
from tianyuan.quantization import fake_quant
from tianyuan.quantization import reference as R

SCALE, ZP = np.float32(0.1), 10


def test_ste_forward_is_reference():
    x = np.random.default_rng(0).uniform(-3, 30, (4, 5)).astype(np.float32)
    y = FakeQuantizeSTE.apply(ty.tensor(x), scale=SCALE, zero_point=ZP, dtype=np.uint8)
    np.testing.assert_array_equal(y.numpy(), R.dequantize(R.quantize(x, SCALE, ZP, np.uint8),
                                                          SCALE, ZP))


def test_ste_gradient_is_clipped_identity_fd_of_clip():
    # away from the clip edges and grid ties, STE = d/dx clip(x, lo, hi) by finite differences
    lo, hi = (0 - ZP) * SCALE, (255 - ZP) * SCALE
    x = np.array([-2.0, -0.53, 0.71, 12.3, 24.0, 30.0])

    def fq(t):
        return FakeQuantizeSTE.apply(t, scale=SCALE, zero_point=ZP, dtype=np.uint8)
    t = ty.tensor(x, requires_grad=True)
    fq(t).sum().backward()
    surrogate = lambda v: np.clip(v, lo, hi)
    fd = (surrogate(x + 1e-4) - surrogate(x - 1e-4)) / 2e-4
    np.testing.assert_allclose(t.grad.numpy(), fd, atol=1e-6)


def test_ste_per_channel():
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    scale = np.float32([0.01, 0.1, 1.0])
    y = FakeQuantizeSTE.apply(ty.tensor(x), scale=scale, zero_point=np.zeros(3, np.int64),
                              dtype=np.int8, axis=0)
    np.testing.assert_array_equal(y.numpy(), R.dequantize(R.quantize(x, scale, 0, np.int8, 0),
                                                          scale, 0, 0))


def lsq(x, s, g=0.5, axis=None, zp=ZP):
    return LSQFunction.apply(x, s, zero_point=zp, dtype=np.uint8, axis=axis, grad_scale=g)


def test_lsq_gradients_by_hand():
    x = np.array([-5.0, 0.33, 1.27, 7.77, 40.0], np.float32)
    s = np.float32(0.1)
    tx, ts = ty.tensor(x, requires_grad=True), ty.tensor(np.array(s), requires_grad=True)
    lsq(tx, ts).sum().backward()
    n = x / s
    q = np.clip(np.rint(n) + ZP, 0, 255) - ZP
    inside = (np.rint(n) + ZP >= 0) & (np.rint(n) + ZP <= 255)
    expected_s = 0.5 * np.sum(np.where(inside, q - n, q))
    np.testing.assert_array_equal(tx.grad.numpy(), inside.astype(np.float32))
    np.testing.assert_allclose(ts.grad.numpy(), expected_s, rtol=1e-5)


def test_lsq_scale_gradient_fd_where_defined():
    # clipped values: y = s * (q_clip - zp) exactly, so the true derivative exists
    x = np.array([[50.0, -9.0, 80.0], [99.0, -6.0, 60.0]], np.float32)
    zp, w = np.array([10, 20]), np.random.default_rng(0).standard_normal((2, 3))

    def loss(s):
        return float((lsq(ty.tensor(x), ty.tensor(s), 1.0, 0, zp).numpy() * w).sum())
    s = ty.tensor(np.float32([0.1, 0.2]), requires_grad=True)
    (lsq(ty.tensor(x), s, 1.0, 0, zp) * ty.tensor(w.astype(np.float32))).sum().backward()
    for c in range(2):
        step = np.zeros(2, np.float32)
        step[c] = 1e-3
        s0 = np.float32([0.1, 0.2])
        fd = (loss(s0 + step) - loss(s0 - step)) / 2e-3
        np.testing.assert_allclose(s.grad.numpy()[c], fd, rtol=1e-3)


def test_lsq_gradient_scale_and_per_channel_shapes():
    x = ty.tensor(np.random.default_rng(3).standard_normal((4, 6)))
    s = ty.tensor(np.full(4, 0.05), requires_grad=True)
    lsq(x, s, g=1 / np.sqrt(6 * 255), axis=0, zp=np.zeros(4, np.int64)).sum().backward()
    assert s.grad.shape == (4,) and np.all(np.isfinite(s.grad.numpy()))


@pytest.mark.parametrize("dtype,zp", [(np.uint8, 7), (np.int8, -3), (np.int8, 0)])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_native_fake_quantize_is_the_reference_bit_for_bit_on_every_isa(dtype, zp, axis):
    # float32 STE runs _C.fake_quantize: y and the mask of _fake_quant (numpy, int64), with
    # NaN, infinities, ties of the rounding, results of -0, rows past one 16384-value run
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 3, 60, 50)) * 4).astype(np.float32)
    channels = 1 if axis is None else x.shape[axis]
    scale = np.float32(0.1) if axis is None else rng.uniform(0.01, 0.2, channels).astype(
        np.float32)
    zps = zp if axis is None else zp + np.arange(channels) % 3
    s0 = float(np.atleast_1d(scale)[0])
    x.flat[:8] = [np.nan, np.inf, -np.inf, 0.5 * s0, 1.5 * s0, -2.5 * s0, -0.01 * s0, 1e30]
    want_y, _, want_in, _ = fake_quant._fake_quant(x, scale, zps, dtype, axis)
    g = rng.standard_normal(x.shape).astype(np.float32)
    for isa in each_isa():
        t = ty.tensor(x, requires_grad=True)
        y = FakeQuantizeSTE.apply(t, scale=scale, zero_point=zps, dtype=dtype, axis=axis)
        y.backward(g)
        np.testing.assert_array_equal(y.numpy().view(np.int32), want_y.view(np.int32),
                                      err_msg=f"y bits, {isa}")
        np.testing.assert_array_equal(t.grad.numpy(), np.where(want_in, g, 0),
                                      err_msg=f"gradient, {isa}")


def test_native_fake_quantize_and_masked_grad_reject_bad_arguments():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"3 values \(x.shape\[1\] of x \(2, 3\)\), got 2"):
        _C.fake_quantize(x, np.ones(2, np.float32), np.zeros(2, np.int32), 1, False)
    with pytest.raises(ValueError, match="axis must be -1"):
        _C.fake_quantize(x, np.ones(1, np.float32), np.zeros(1, np.int32), 2, False)
    with pytest.raises(ValueError, match="positive and finite"):
        _C.fake_quantize(x, np.zeros(1, np.float32), np.zeros(1, np.int32), -1, False)
    with pytest.raises(ValueError, match=r"same shape, got \(2, 3\) and \(3, 2\)"):
        _C.masked_grad(x, np.zeros((3, 2), bool))
    with pytest.raises(ValueError, match="float32 and mask bool"):
        _C.masked_grad(x, np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("dtype,zp,axis", [(np.uint8, 10, None), (np.int8, 0, 0),
                                           (np.int8, -2, 1)])
def test_lsq_native_gradients_are_the_numpy_formula(dtype, zp, axis):
    # float32 LSQ runs natively: dx bit for bit, the scale's gradient (float64 sums in another
    # order) to rounding; chunks of 16384 values per channel row, clipped values both sides
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2, 3, 90, 100)) * 6).astype(np.float32)
    channels = 1 if axis is None else x.shape[axis]
    s = rng.uniform(0.02, 0.05, channels).astype(np.float32)
    s = s[0].reshape(()) if axis is None else s
    zps = zp if axis is None else np.full(channels, zp)
    g = rng.standard_normal(x.shape).astype(np.float32)
    y, level, inside, _ = fake_quant._fake_quant(x, np.maximum(s, 1e-12), zps, dtype, axis)
    ratio = x / np.maximum(s, 1e-12).reshape(fake_quant._shape(x.ndim, axis))
    axes = tuple(i for i in range(x.ndim) if axis is None or i != axis)
    want_ds = ((g * (level - np.where(inside, ratio, 0.0))).sum(axis=axes).reshape(s.shape)
               * 0.5).astype(np.float32)
    assert 0 < inside.mean() < 1
    t, ts = ty.tensor(x, requires_grad=True), ty.tensor(s, requires_grad=True)
    LSQFunction.apply(t, ts, zero_point=zps, dtype=dtype, axis=axis, grad_scale=0.5).backward(g)
    np.testing.assert_array_equal(t.grad.numpy(), np.where(inside, g, 0))
    np.testing.assert_allclose(ts.grad.numpy(), want_ds, rtol=1e-6)


@pytest.mark.parametrize("clamp", [None, (0.0, 6.0)])
@pytest.mark.parametrize("dtype,zp", [(np.uint8, 7), (np.int8, 0)])
def test_batch_norm_affine_fake_quantizes_as_fake_quantize_on_every_isa(clamp, dtype, zp):
    # the affine pass with fake_quant writes _C.fake_quantize's y and mask of the affine's
    # output: ties of the rounding (channel 0 passes x through), values past the range, NaN
    rng = np.random.default_rng(4)
    s = np.float32(0.05)
    x = (rng.standard_normal((3, 5, 7, 9)) * 4).astype(np.float32)
    x[0, 0, 0, :8] = np.array([0.5, 1.5, -2.5, -0.01, 30, -30, 2.5, 3.5], np.float32) * s
    x[1, 2, 3, :3] = [np.nan, np.inf, -np.inf]
    a = rng.uniform(-2, 2, 5).astype(np.float32)
    d = rng.uniform(-1, 1, 5).astype(np.float32)
    a[0], d[0] = 1, 0
    qmin, qmax = R.qrange(dtype)
    for isa in each_isa():
        y = _C.batch_norm_affine(x, a, d, clamp)
        want_y, want_in = _C.fake_quantize(y, np.array([s]), np.array([zp], np.int32), -1,
                                           dtype == np.int8)
        got_y, got_in = _C.batch_norm_affine(x, a, d, clamp, (s, qmin - zp, qmax - zp))
        np.testing.assert_array_equal(got_y.view(np.int32), want_y.view(np.int32), err_msg=isa)
        np.testing.assert_array_equal(got_in, want_in, err_msg=isa)
        assert got_in.dtype == bool and 0 < got_in.mean() < 1
    with pytest.raises(ValueError, match="fake_quant needs float32 x"):
        _C.batch_norm_affine(x.astype(np.float64), a.astype(np.float64), d.astype(np.float64),
                             None, (0.1, 0.0, 255.0))
    with pytest.raises(ValueError, match="scale positive and finite, lo <= hi"):
        _C.batch_norm_affine(x, a, d, None, (0.1, 5.0, 4.0))
