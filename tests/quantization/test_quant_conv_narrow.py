"""The narrow form of int8 convolution weights (framework/csrc/int8_cgemm/int8_cgemm.h, NarrowWeights),
on the AVX2 tile without VNNI: bit-exact on every ISA path, its split, copies, bounds."""
import numpy as np
import pytest
from conv_cases import ALGO_CASES, CASES, conv_case
from helpers import check_quant, guarded_copy

from tianyuan import available_isas
from tianyuan.quantization import kernels as K
from tianyuan.quantization import packing
from tianyuan.quantization import reference as R

# The narrow form (framework/csrc/int8_cgemm/int8_cgemm.h, NarrowWeights): the AVX2 tile without VNNI
# sums u8 x s8 pairs with vpmaddubsw, exact only while a pair has |w0| + |w1| <= 128; pairs
# past it are clamped to [-64, 64] and the rest added from a sparse residual. 7-bit weights
# (reduce_range; rows of all +64 and all -64) have none; full-range ones (rows of all 127 and
# all -128 beside uniform ones) put most quads in it. Activations 0 and 255 side by side.
NARROW_CASES = [c for c in ALGO_CASES if c[1] != c[10]][:12] + [CASES[0], CASES[2], CASES[14],
                                                                 CASES[-2], CASES[-1]]


def _narrow(rng, wt, x, in_dtype, bits):
    top = 64 if bits == 7 else 127
    wt = rng.integers(-top - (bits == 8), top + 1, wt.shape).astype(np.int8)
    wt[0], wt[-1] = top, -top - (bits == 8)
    lo, hi = R.qrange(in_dtype)
    x = np.where(rng.random(x.shape) < 0.5, np.where(rng.random(x.shape) < 0.5, lo, hi), x)
    return wt, x.astype(in_dtype)


@pytest.mark.parametrize("case", NARROW_CASES)
@pytest.mark.parametrize("algorithm", ["packed", "direct"])
@pytest.mark.parametrize("in_dtype,in_zp,relu", [(np.uint8, 117, False), (np.int8, -3, True)])
@pytest.mark.parametrize("bits", [7, 8])
def test_conv2d_narrow_form(case, algorithm, in_dtype, in_zp, relu, bits, monkeypatch):
    if algorithm == "direct" and (case[1] // case[10]) % 4:
        pytest.skip("direct needs C/groups divisible by 4")
    monkeypatch.setattr(packing, "NARROW_MAX_RESIDUAL", 1.0)  # whatever the residual costs
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 13)
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, in_dtype)
    wt, x = _narrow(rng, wt, x, in_dtype, bits)
    packed = K.pack_weights(wt, groups)
    residual = packed.narrow[2].size // 2
    assert residual == 0 if bits == 7 else residual > 0
    args = (bias, mult, shift, 64, relu, np.uint8)
    check_quant(lambda: K.conv2d(x, in_zp, packed, *args, **geom, algorithm=algorithm),
                lambda: R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))


@pytest.mark.parametrize("n,width", [(1, w) for w in (1, 2, 3, 4, 5, 8, 9, 12, 13, 20, 28, 49)]
                         + [(2, 3), (3, 5), (2, 10)])
@pytest.mark.parametrize("oc", [5, 13])
@pytest.mark.parametrize("bits", [7, 8])
def test_conv2d_narrow_tails(n, width, oc, bits, monkeypatch):
    """Every count of positions a block can end with, on the narrow tile (and the AVX-VNNI
    one): steps of 16 and 8 positions and the few-position kernel (tile6_few) for the last
    1-4, over channel blocks of 6 and shorter, with and without a residual; blocks that span
    images too."""
    monkeypatch.setattr(packing, "NARROW_MAX_RESIDUAL", 1.0)
    rng = np.random.default_rng(width * 31 + oc + bits + n)
    case = (n, 8, 1, width, oc, 3, 3, 1, 1, 1, 1)
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, np.uint8)
    wt, x = _narrow(rng, wt, x, np.uint8, bits)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 64, False, np.uint8)
    for algorithm in ("packed", "direct"):
        check_quant(lambda: K.conv2d(x, 117, packed, *args, **geom, algorithm=algorithm),
                    lambda: R.qconv2d(x, 117, wt, *args, groups=groups, **geom))


@pytest.mark.parametrize("width", [1, 3, 11])
def test_conv2d_narrow_tail_reads_nothing_past_the_weights(width):
    """The few-position kernel loads a k-quad's 6 channels as 8 lanes: in a block of 1
    channel at the end of the weights, the lanes past it must not be read from past the end
    (the narrow form placed before an unreadable page)."""
    rng = np.random.default_rng(19)
    case = (1, 8, 1, width, 7, 3, 3, 1, 1, 1, 1)
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, np.uint8)
    wt, x = _narrow(rng, wt, x, np.uint8, 7)
    packed = K.pack_weights(wt, groups)
    form = packed.narrow
    if form is None:
        pytest.skip("no narrow form on this ISA path")
    bytes_, keep = guarded_copy(form[0])
    packed._narrow = (bytes_,) + tuple(form[1:])
    args = (bias, mult, shift, 64, False, np.uint8)
    check_quant(lambda: K.conv2d(x, 117, packed, *args, **geom),
                lambda: R.qconv2d(x, 117, wt, *args, groups=groups, **geom))
    del packed, bytes_, keep


def _rows(packed, groups, ocg, kp):
    """Conv-packed bytes (int8_cgemm.h) -> (OC, Kp / 4, 4), row j's k-quads."""
    out = np.empty((groups * ocg, kp // 4, 4), np.int16)
    for j in range(groups * ocg):
        g, b, r = j // ocg, j % ocg // 6, j % ocg % 6
        rb = min(6, ocg - 6 * b)
        block = packed[g * ocg * kp + 6 * b * kp:][:rb * kp].reshape(kp // 4, rb, 4)
        out[j] = block[:, r]
    return out


@pytest.mark.parametrize("shape,groups", [((13, 8, 3, 3), 1), ((12, 5, 1, 3), 2),
                                          ((7, 3, 7, 7), 1), ((6, 64, 1, 1), 1)])
def test_split_narrow(shape, groups):
    """Narrow bytes plus residual give the packed weights back; every pair of either obeys
    the bound; pairs within it are left whole; the residual lists each row's quads in order."""
    rng = np.random.default_rng(3)
    w = np.clip(np.round(rng.normal(0, 45, shape)), -128, 127).astype(np.int8)
    w.reshape(-1)[::7] = 127
    w.reshape(-1)[3::11] = -128
    packed = K.pack_weights(w, groups)
    narrow, ptr, res = K.split_narrow(packed)
    ocg, kp = shape[0] // groups, -(-np.prod(shape[1:]) // 4) * 4
    full = _rows(packed.packed, groups, ocg, kp)
    rows = _rows(narrow, groups, ocg, kp)
    rest = np.zeros_like(rows)
    assert ptr[0] == 0 and (np.diff(ptr) >= 0).all() and res.size == 2 * ptr[-1]
    for j in range(shape[0]):
        quads, words = res[2 * ptr[j]:2 * ptr[j + 1]:2], res[2 * ptr[j] + 1:2 * ptr[j + 1]:2]
        assert (np.diff(quads) > 0).all() and (words != 0).all()
        rest[j, quads] = words.astype("<i4").view(np.int8).reshape(-1, 4)
    np.testing.assert_array_equal(rows + rest, full)
    pair = lambda a: np.abs(a.reshape(*a.shape[:2], 2, 2)).sum(-1)  # noqa: E731
    assert pair(rows).max() <= 128 and pair(rest).max() <= 128
    assert (rest[np.repeat(pair(full) <= 128, 2, -1)] == 0).all()
    assert (pair(full) > 128).any()


def test_narrow_form_survives_copies():
    """A copy (pickle, deepcopy) keeps the narrow form on 64-byte boundaries, and the 7-bit
    weights' form its sharing of the packed bytes; a state pickled before the form existed
    (a bool `narrow`) loads and makes it anew."""
    import copy
    import pickle
    rng = np.random.default_rng(5)
    w8 = np.clip(np.round(rng.normal(0, 30, (12, 16, 3, 3))), -128, 127).astype(np.int8)
    w7 = np.clip(w8 // 2, -63, 63).astype(np.int8)
    for w in (w8, w7):
        packed = K.pack_weights(w)
        form = packed.narrow
        assert form is not None and (form[2].size > 0) == (w is w8)
        for clone in (pickle.loads(pickle.dumps(packed)), copy.deepcopy(packed)):
            got = clone.narrow
            assert got[0].ctypes.data % 64 == 0 and (got[0] is clone.packed) == (w is w7)
            for a, b in zip(form, got):
                np.testing.assert_array_equal(a, b)
        old = packed.__dict__.copy()
        del old["_narrow"]
        old["narrow"] = False
        legacy = K.PackedWeight.__new__(K.PackedWeight)
        legacy.__setstate__(old)
        np.testing.assert_array_equal(legacy.narrow[2], form[2])


def test_narrow_form_is_what_runs():
    """On AVX2 (without VNNI) the narrow form is what the tile reads: a false one, the raw
    full-range bytes with no residual, saturates and the result is wrong, which shows the
    tests above run it. Forms that do not match the weights are refused."""
    if "avx2" not in available_isas():
        pytest.skip("no AVX2 on this machine")
    import tianyuan as ty
    x = np.full((1, 8, 6, 6), 255, np.uint8)
    wt = np.full((6, 8, 3, 3), 127, np.int8)
    packed = K.pack_weights(wt)
    assert packed.narrow is None  # every quad in the residual: the split tile is faster
    qargs = (np.zeros(6, np.int32), *R.quantize_multiplier(np.full(6, 1e-6)), 0, False,
             np.uint8)
    original = ty.current_isa()
    try:
        ty.set_isa("avx2")
        right = K.PreparedConv(packed, *qargs, padding=1)(x, 0)
        np.testing.assert_array_equal(right, R.qconv2d(x, 0, wt, *qargs, padding=1))
        packed._narrow = (packed.packed, np.zeros(7, np.int32), np.zeros(0, np.int32))
        assert (K.PreparedConv(packed, *qargs, padding=1)(x, 0) < right).any()
        packed._narrow = (packed.packed, np.zeros(6, np.int32), np.zeros(0, np.int32))
        with pytest.raises(ValueError, match="narrow form .* 6 row offsets.* OC 6"):
            K.PreparedConv(packed, *qargs, padding=1)(x, 0)
    finally:
        ty.set_isa(original)
