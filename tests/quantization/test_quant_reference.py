"""The numpy reference itself: multipliers, rounding, and the zero-point identities."""
import numpy as np
import pytest

from tianyuan.quantization import reference as R


def test_multiplier_accuracy_and_range():
    real = np.array([1.0, 0.5, 0.25, 3.7, 1e-3, 0.9999999999, 2.0 ** -31, 1e-12, 0.0])
    m, s = R.quantize_multiplier(real)
    assert m.dtype == np.int32 and s.dtype == np.int32
    assert np.all((s >= 1) & (s <= 62))
    approx = m.astype(np.float64) * 2.0 ** -s.astype(np.float64)
    normal = real >= 2.0 ** -31
    np.testing.assert_allclose(approx[normal], real[normal], rtol=2.0 ** -30)
    assert np.all((m[normal] >= 2 ** 30) & (m[normal] < 2 ** 31))
    assert m[-1] == 0
    with pytest.raises(ValueError, match="quantize_multiplier"):
        R.quantize_multiplier([-1.0])


def test_requantize_is_round_half_up_of_the_exact_product():
    acc = np.arange(-40, 41, dtype=np.int32).reshape(1, -1)
    m, s = R.quantize_multiplier([0.25])          # exactly 2**30 * 2**-32
    q = R.requantize(acc, 0, m, s, 0, False, np.int8)
    expected = np.floor(acc / 4 + 0.5).astype(np.int8)
    np.testing.assert_array_equal(q, expected)


def test_requantize_matches_float_within_rounding():
    rng = np.random.default_rng(0)
    acc = rng.integers(-2 ** 20, 2 ** 20, (5, 9)).astype(np.int32)
    bias = rng.integers(-500, 500, 9).astype(np.int32)
    real = rng.uniform(1e-5, 1e-3, 9)
    m, s = R.quantize_multiplier(real)
    q = R.requantize(acc, bias, m, s, 128, False, np.uint8).astype(np.float64)
    exact = np.clip(np.floor((acc + bias) * real + 0.5) + 128, 0, 255)
    assert np.abs(q - exact).max() <= 1


def test_requantize_relu_clamp_and_overflow_check():
    acc = np.array([[-1000, 1000]], np.int32)
    m, s = R.quantize_multiplier([1.0])
    np.testing.assert_array_equal(R.requantize(acc, 0, m, s, 10, True, np.uint8), [[10, 255]])
    np.testing.assert_array_equal(R.requantize(acc, 0, m, s, 0, False, np.int8), [[-128, 127]])
    with pytest.raises(ValueError, match="overflows int32"):
        R.requantize(np.array([[2 ** 31 - 1]], np.int32), [1], m, s, 0, False, np.int8)


def test_gemm_zero_point_is_row_sum_correction():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (4, 7), dtype=np.uint8)
    w = rng.integers(-128, 128, (3, 7), dtype=np.int8)
    raw = a.astype(np.int64) @ w.astype(np.int64).T
    np.testing.assert_array_equal(R.gemm(a, 9, w), raw - 9 * R.row_sums(w)[None, :])


def test_quantize_dequantize_round_trip_per_channel():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    scale = np.abs(x).max(axis=(0, 2)) / 127
    q = R.quantize(x, scale, np.zeros(4, np.int64), np.int8, axis=1)
    back = R.dequantize(q, scale, 0, axis=1)
    assert np.all(np.abs(back - x) <= scale[None, :, None] / 2 + 1e-7)
    qu = R.quantize(x, 0.02, 128, np.uint8)
    assert qu.dtype == np.uint8 and qu.min() >= 0


def test_avg_pool_rounds_half_up_and_conv_pads_with_zero_point():
    x = np.array([[[[1, 2], [3, 4]]]], np.uint8)   # mean 2.5 around zero point 0 -> 3
    assert R.avg_pool2d(x, 0, 2)[0, 0, 0, 0] == 3
    w = np.ones((1, 1, 3, 3), np.int8)
    acc = R.conv2d(np.full((1, 1, 2, 2), 7, np.uint8), 7, w, padding=1)
    np.testing.assert_array_equal(acc, np.zeros((1, 1, 2, 2), np.int32))
