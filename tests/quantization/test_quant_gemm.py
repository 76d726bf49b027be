"""Native int8 GEMM, requantize and linear: bit-exact to the reference on every ISA path."""
import numpy as np
import pytest
from helpers import check_quant

import tianyuan as ty
from tianyuan import _native
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R

# rows of every remainder modulo the AVX2 tile's 4 and the AVX-VNNI tile's 6
SHAPES = [(1, 1, 1), (1, 3, 17), (3, 17, 33), (17, 33, 65), (65, 16, 4), (7, 65, 3),
          (13, 70, 130), (96, 64, 64), (8, 20, 9), (10, 31, 40)]


def _act(rng, shape, dtype):
    lo, hi = R.qrange(dtype)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _channel_params(rng, n, low=1e-4, high=1e-2):
    m, s = R.quantize_multiplier(rng.uniform(low, high, n))
    return rng.integers(-5000, 5000, n).astype(np.int32), m, s


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("dtype,zp", [(np.uint8, 0), (np.uint8, 131), (np.int8, 0), (np.int8, -7)])
def test_gemm_s32(m, n, k, dtype, zp):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = _act(rng, (m, k), dtype)
    w = _act(rng, (n, k), np.int8)
    check_quant(lambda: K.gemm(a, zp, K.pack_weights(w)), lambda: R.gemm(a, zp, w))


@pytest.mark.parametrize("m,n,k", SHAPES[1:6])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("in_dtype,in_zp,out_dtype,out_zp",
                         [(np.uint8, 128, np.uint8, 77), (np.int8, 0, np.int8, 0),
                          (np.uint8, 3, np.int8, -5), (np.int8, 0, np.uint8, 250)])
def test_linear(m, n, k, relu, in_dtype, in_zp, out_dtype, out_zp):
    rng = np.random.default_rng(k)
    x, w = _act(rng, (m, k), in_dtype), _act(rng, (n, k), np.int8)
    bias, mult, shift = _channel_params(rng, n)
    packed = K.pack_weights(w)
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    check_quant(lambda: K.linear(x, in_zp, packed, *args), lambda: R.linear(x, in_zp, w, *args))


# (M, N, K, on AMX tiles for a uint8 x on the amx ISA): past PreparedLinear's thresholds (8
# rows, 2 ** 19 multiply-adds) where K is a multiple of 64 and N of 32 (odd rows: a position
# block in part), then shapes just short of one condition each
AMX_LINEAR = [(8, 64, 1024, True), (9, 96, 640, True), (33, 32, 512, True), (200, 64, 64, True),
              (1030, 32, 64, True), (7, 64, 1024, False), (64, 64, 64, False),
              (40, 48, 1024, False), (40, 64, 1000, False)]


@pytest.mark.parametrize("m,n,k,amx", AMX_LINEAR)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("in_dtype,in_zp,out_dtype,out_zp",
                         [(np.uint8, 128, np.uint8, 77), (np.uint8, 3, np.int8, -5),
                          (np.int8, 0, np.uint8, 250)])
def test_linear_on_amx_tiles(m, n, k, amx, relu, in_dtype, in_zp, out_dtype, out_zp):
    rng = np.random.default_rng(m + n + k)
    x, w = _act(rng, (m, k), in_dtype), _act(rng, (n, k), np.int8)
    bias, mult, shift = _channel_params(rng, n)
    packed = K.pack_weights(w)
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    takes = []

    def native():
        prepared = K.PreparedLinear(packed, *args)
        takes.append((ty.current_isa(), prepared.takes_amx(x)))
        return prepared(x, in_zp)
    check_quant(native, lambda: R.linear(x, in_zp, w, *args))
    amx = amx and in_dtype == np.uint8
    assert takes == [(isa, isa == "amx" and amx) for isa, _ in takes]


def test_linear_per_tensor_scalars_broadcast():
    rng = np.random.default_rng(5)
    x, w = _act(rng, (4, 9), np.uint8), _act(rng, (5, 9), np.int8)
    m, s = R.quantize_multiplier([0.003])
    expected = R.linear(x, 10, w, np.zeros(5, np.int32), np.repeat(m, 5), np.repeat(s, 5), 20,
                        False, np.uint8)
    check_quant(lambda: K.linear(x, 10, K.pack_weights(w), 0, m, s, 20, False, np.uint8),
                lambda: expected)


@pytest.mark.parametrize("m,n", [(1, 1), (3, 7), (5, 16), (4, 17), (2, 33), (9, 100)])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype,zp", [(np.uint8, 0), (np.uint8, 200), (np.int8, 0), (np.int8, 9)])
def test_requantize_full_int32_range(m, n, relu, dtype, zp):
    rng = np.random.default_rng(m * n)
    acc = rng.integers(-2 ** 31 + 2 ** 20, 2 ** 31 - 2 ** 20, (m, n)).astype(np.int32)
    acc.flat[0], acc.flat[-1] = -2 ** 31 + 2 ** 20, 2 ** 31 - 2 ** 20 - 1
    bias = rng.integers(-2 ** 20, 2 ** 20, n).astype(np.int32)
    real = np.exp(rng.uniform(np.log(1e-9), np.log(4.0), n))   # shifts from 29 to 60
    mult, shift = R.quantize_multiplier(real)
    args = (acc, bias, mult, shift, zp, relu, dtype)
    check_quant(lambda: K.requantize(*args), lambda: R.requantize(*args))


def test_requantize_ties_and_tiny_multipliers():
    acc = np.arange(-64, 64, dtype=np.int32).reshape(2, 64)
    real = np.array([0.5, 0.25, 1.0, 2.0 ** -33] * 16)        # ties at every .5; shift 62
    mult, shift = R.quantize_multiplier(real)
    args = (acc, np.zeros(64, np.int32), mult, shift, 0, False, np.int8)
    check_quant(lambda: K.requantize(*args), lambda: R.requantize(*args))


def test_gemm_accumulator_near_int32_limit():
    k = 65000                                  # 65000 * 255 * 128 ~ 2**31 - 5e6
    a = np.full((2, k), 255, np.uint8)
    a[1] = 0
    w = np.stack([np.full(k, -128), np.full(k, 127), np.arange(k) % 256 - 128]).astype(np.int8)
    check_quant(lambda: K.gemm(a, 0, K.pack_weights(w)), lambda: R.gemm(a, 0, w))
    check_quant(lambda: K.gemm(a, 255, K.pack_weights(w)), lambda: R.gemm(a, 255, w))


def test_packed_weights_survive_isa_switch_and_report_size():
    w = np.arange(-60, 60, dtype=np.int8).reshape(3, 40)
    packed = K.pack_weights(w)
    assert packed.packed.nbytes == 16 * 40 and packed.row_sums.tolist() == R.row_sums(w).tolist()
    a = np.arange(80, dtype=np.uint8).reshape(2, 40)
    check_quant(lambda: K.gemm(a, 1, packed), lambda: R.gemm(a, 1, w))


def test_errors_name_the_op():
    with pytest.raises(ValueError, match="pack_weights"):
        K.pack_weights(np.zeros((2, 3), np.float32))
    packed = K.pack_weights(np.zeros((2, 3), np.int8))
    with pytest.raises(ValueError, match="gemm: x"):
        K.gemm(np.zeros((2, 4), np.uint8), 0, packed)
    with pytest.raises(ValueError, match="per-channel"):
        K.linear(np.zeros((2, 3), np.uint8), 0, packed, np.zeros(3), 1, 31, 0, False, np.uint8)
    with pytest.raises(ValueError, match=r"linear: x \(2, 4\) does not match weights"):
        K.linear(np.zeros((2, 4), np.uint8), 0, packed, np.zeros(2), 1, 31, 0, False, np.uint8)


def test_vnni_peak_measures_or_says_why_not():
    with pytest.raises(ValueError, match="steps"):
        K.vnni_peak(steps=0)
    if "vnni" not in _native.available_isas():
        with pytest.raises(RuntimeError, match="VNNI"):
            K.vnni_peak(steps=1000, repeat=1)
        return
    # 12 vpdpbusd x 64 multiply-adds per step on each thread: between a 0.1 GHz and a
    # 6.5 GHz core issuing 2 a cycle (a miscounted or optimised-away loop lands outside)
    per_core = K.vnni_peak(steps=200_000, repeat=3) / ty.get_num_threads()
    assert 0.1e9 * 2 * 64 * 2 < per_core < 6.5e9 * 2 * 64 * 2


def test_avx2_peak_measures_or_says_why_not():
    with pytest.raises(ValueError, match="steps"):
        K.avx2_peak(steps=0)
    if "avx2" not in _native.available_isas():
        with pytest.raises(RuntimeError, match="AVX2"):
            K.avx2_peak(steps=1000, repeat=1)
        return
    # 6 vpmaddwd x 16 multiply-adds per step on each thread: between a 0.1 GHz core issuing
    # one pair a cycle and a 6.5 GHz one issuing 4 (a miscounted or optimised-away loop lands
    # outside)
    per_core = K.avx2_peak(steps=200_000, repeat=3) / ty.get_num_threads()
    assert 0.1e9 * 16 * 2 < per_core < 6.5e9 * 4 * 16 * 2


def test_avxvnni_peak_measures_or_says_why_not():
    with pytest.raises(ValueError, match="steps"):
        K.avxvnni_peak(steps=0)
    if "avxvnni" not in _native.available_isas():
        with pytest.raises(RuntimeError, match="AVX-VNNI"):
            K.avxvnni_peak(steps=1000, repeat=1)
        return
    # 12 vpdpbusd x 32 multiply-adds per step on each thread, as the VNNI peak's bounds
    per_core = K.avxvnni_peak(steps=200_000, repeat=3) / ty.get_num_threads()
    assert 0.1e9 * 2 * 32 * 2 < per_core < 6.5e9 * 2 * 32 * 2


def test_amx_peak_measures_or_says_why_not():
    with pytest.raises(ValueError, match="steps"):
        K.amx_peak(steps=0)
    if "amx" not in _native.available_isas():
        with pytest.raises(RuntimeError, match="AMX"):
            K.amx_peak(steps=100, repeat=1)
        return
    # 4 TDPBUSD x 16 x 16 x 64 multiply-adds per step on each thread, at most one every 16
    # cycles: between a 0.1 GHz and a 6.5 GHz core (a miscounted or optimised-away loop
    # lands outside)
    per_core = K.amx_peak(steps=20_000, repeat=3) / ty.get_num_threads()
    assert 0.1e9 * 1024 * 2 < per_core < 6.5e9 * 1024 * 2
