"""Native int8 conv2d (packed and direct algorithms, grouped, depthwise): bit-exact on every
ISA path."""
import numpy as np
import pytest
from helpers import check_quant

from tianyuan import _C, available_isas
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R

# (N, C, H, W, OC, kh, kw, stride, padding, dilation, groups)
CASES = [
    (1, 3, 5, 5, 4, 1, 1, 1, 0, 1, 1),            # 1x1: straight to the GEMM
    (2, 17, 6, 7, 33, 1, 1, 1, 0, 1, 1),
    (1, 5, 7, 6, 3, 1, 1, 2, 0, 1, 1),            # 1x1 strided: im2row
    (2, 3, 9, 8, 17, 3, 3, 1, 1, 1, 1),
    (1, 7, 11, 10, 20, 3, 3, 2, 1, 1, 1),
    (1, 4, 10, 9, 5, 5, 3, (2, 1), (2, 1), 1, 1),
    (1, 6, 9, 9, 6, 3, 3, 1, 2, 2, 1),            # dilation
    (1, 3, 8, 8, 16, 7, 7, 2, 3, 1, 1),           # ResNet stem shape, small
    (2, 8, 6, 6, 12, 3, 3, 1, 1, 1, 4),           # grouped
    (1, 6, 7, 7, 6, 3, 3, 1, 1, 1, 6),            # depthwise
    (2, 5, 9, 8, 5, 3, 3, 2, 1, 1, 5),            # depthwise strided
    (1, 4, 8, 8, 8, 5, 5, 1, 2, 1, 4),            # depthwise, channel multiplier 2
    (1, 3, 9, 9, 3, 3, 3, 1, (1, 1, 0, 2), 2, 3),  # depthwise, asymmetric pad, dilation
    (1, 5, 20, 19, 13, 3, 3, 2, 1, 1, 1),         # several position blocks, channel tail
    (2, 9, 17, 23, 7, 3, 3, 3, 1, 1, 1),          # stride 3: scalar gather
    (1, 16, 12, 12, 70, 1, 1, 1, 0, 1, 1),        # 1x1: runs merge across rows
    (1, 4, 5, 70, 3, 1, 3, (1, 2), (0, 1), 1, 1),  # rows longer than a block
    (2, 3, 20, 33, 3, 3, 3, 1, 1, 1, 3),          # depthwise SIMD: 16-column steps + tail
    (1, 5, 19, 37, 5, 3, 3, 2, 1, 1, 5),          # depthwise SIMD stride 2
    (1, 4, 18, 21, 4, 5, 5, 1, 2, 1, 4),          # depthwise 5x5
    (5, 6, 3, 3, 13, 3, 3, 1, 1, 1, 1),           # position blocks span 5 images
    (9, 4, 2, 3, 7, 1, 1, 1, 0, 1, 1),            # 1x1, 9 images in one block
    (3, 8, 9, 9, 10, 3, 3, 2, 1, 1, 2),           # strided, grouped, blocks span images
    (1, 2, 30, 70, 2, 3, 3, 1, 1, 1, 2),          # depthwise VNNI: 64-output rows + tail
    (2, 3, 14, 14, 3, 3, 3, 2, 1, 1, 3),          # depthwise stride 2, flat (small map)
    (1, 2, 40, 75, 2, 5, 5, 2, 2, 1, 2),          # depthwise 5x5 stride 2, rows
    (1, 3, 11, 13, 6, 7, 6, 1, (3, 2, 1, 4), 1, 3),  # 7x6 kernel, asymmetric pad, mult 2
    (1, 2, 12, 12, 2, 3, 4, (2, 1), 1, (2, 1), 2),   # row dilation, row stride 2: rows
    (1, 2, 9, 9, 2, 1, 9, 1, (0, 4), 1, 2),       # kernel wider than 8: AVX-512 path
    (1, 2, 12, 12, 2, 3, 3, 1, (2, 2, 1, 1), (2, 1), 2),  # row dilation, unpadded path
    (2, 3, 6, 5, 3, 3, 3, 1, (0, 0, 1, 1), 1, 3),  # unpadded, no row padding: oh < h
    # AVX-VNNI depthwise: 32-output rows, stride 2 over a flat plane, an 8x8 kernel
    (1, 2, 6, 64, 2, 3, 3, 1, 1, 1, 2),
    (1, 3, 6, 6, 3, 3, 3, 2, 1, 1, 3),
    (1, 2, 13, 17, 4, 8, 8, 1, (3, 4, 4, 3), 1, 2),
    (1, 60, 7, 7, 14, 3, 3, 1, 1, 1, 1),          # 540 rows k: past 128 k-quads
    (3, 130, 4, 5, 9, 3, 3, 1, 1, 1, 1),          # 1170 rows k, the block spans images
    (1, 140, 5, 5, 8, 3, 3, 2, 1, 1, 2),          # grouped, 630 rows k per group
    # >= 8 position blocks of >= 512 rows k: AVX2 widens the weights once per call
    (2, 64, 16, 16, 9, 3, 3, 1, 1, 1, 1),
    (1, 128, 20, 20, 8, 3, 3, 1, 1, 1, 2),
]


def _case(rng, case, in_dtype, scales=None):
    n, c, h, w, oc, kh, kw, stride, padding, dilation, groups = case
    lo, hi = R.qrange(in_dtype)
    x = rng.integers(lo, hi + 1, (n, c, h, w)).astype(in_dtype)
    wt = rng.integers(-128, 128, (oc, c // groups, kh, kw)).astype(np.int8)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    real = rng.uniform(2e-4, 4e-3, oc) if scales is None else np.resize(scales, oc)
    mult, shift = R.quantize_multiplier(real)
    geom = dict(stride=stride, padding=padding, dilation=dilation)
    return x, wt, bias, mult, shift, geom, groups


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("in_dtype,in_zp,out_dtype,out_zp",
                         [(np.uint8, 117, np.uint8, 64), (np.int8, 0, np.int8, 0),
                          (np.int8, -3, np.uint8, 128)])
def test_conv2d(case, relu, in_dtype, in_zp, out_dtype, out_zp):
    rng = np.random.default_rng(sum(np.ravel(case[:7])))
    x, wt, bias, mult, shift, geom, groups = _case(rng, case, in_dtype)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    check_quant(lambda: K.conv2d(x, in_zp, packed, *args, **geom),
                lambda: R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))


@pytest.mark.parametrize("case", [CASES[3], CASES[9], CASES[-2]])
def test_conv2d_out_max_is_relu6_clamp(case):
    rng = np.random.default_rng(7)
    x, wt, bias, mult, shift, geom, groups = _case(rng, case, np.uint8)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 20, True, np.uint8)
    check_quant(lambda: K.conv2d(x, 131, packed, *args, **geom, out_max=90),
                lambda: np.minimum(R.qconv2d(x, 131, wt, *args, groups=groups, **geom), 90))


@pytest.mark.parametrize("case", [CASES[3], CASES[9], CASES[17], CASES[19], CASES[24]])
def test_conv2d_large_scales(case):
    """Requantization scales 0.02 to 1.3 (shifts 30 to 36): the kernels take a 32-bit
    shortcut for shifts >= 32 only. Small weights keep most results inside the range."""
    rng = np.random.default_rng(11)
    scales = [0.02, 0.3, 0.7, 1.3]
    x, wt, bias, mult, shift, geom, groups = _case(rng, case, np.uint8, scales)
    assert shift.min() < 32 <= shift.max()
    wt = (wt // 64).astype(np.int8)
    bias = bias // 64
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 100, False, np.uint8)
    check_quant(lambda: K.conv2d(x, 120, packed, *args, **geom),
                lambda: R.qconv2d(x, 120, wt, *args, groups=groups, **geom))


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("sign", [1, -1])
def test_conv2d_requantization_ties(groups, sign):
    """Shift 34 (the s32 shortcut with the rounding half on the high halves) on every residue
    of t = acc + bias modulo 16, ties (t = 16k + 8, negative and positive) among them: the
    output is floor(t / 16 + 1 / 2) exactly, for the convolution tile and depthwise."""
    x = np.arange(256, dtype=np.uint8)[None, None].repeat(3, 1).reshape(1, 3, 16, 16)
    wt = np.zeros((3, 3 // groups, 1, 1), np.int8)
    for c in range(3):
        wt[c, c % (3 // groups)] = sign
    bias = np.array([-150, -7, 0], np.int32) * sign
    mult, shift = np.full(3, 2 ** 30, np.int32), np.full(3, 34, np.int32)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 128, False, np.uint8)
    expected = R.qconv2d(x, 0, wt, *args, groups=groups)
    t = sign * x.astype(np.int64) + bias.reshape(1, 3, 1, 1)
    np.testing.assert_array_equal(expected, np.floor(t / 16 + 0.5).astype(np.int64) + 128)
    check_quant(lambda: K.conv2d(x, 0, packed, *args), lambda: expected)


def test_conv2d_checks_shapes():
    packed = K.pack_weights(np.zeros((4, 3, 3, 3), np.int8))
    with pytest.raises(ValueError, match="conv2d"):
        K.conv2d(np.zeros((1, 2, 5, 5), np.uint8), 0, packed, 0, 1 << 30, 31, 0, False, np.uint8)


# The two algorithms of the non-depthwise conv (framework/csrc/int8_cgemm.h), each forced:
# every case above whose C/groups is a multiple of 4 (which direct needs), and shapes for the
# direct algorithm's edges: rows wider than a 64-position block, blocks over several rows,
# stride phases 2 and 3, dilation, asymmetric padding, oh < h, output-channel chunks at
# batch 1, groups, several images.
ALGO_CASES = [c for c in CASES if (c[1] // c[10]) % 4 == 0 and c[1] != c[10]] + [
    (1, 4, 3, 70, 5, 3, 3, 1, 1, 1, 1),
    (2, 8, 9, 11, 13, 3, 3, 2, 1, 1, 1),
    (1, 12, 20, 70, 9, 3, 3, 1, 1, 1, 1),
    (1, 8, 9, 9, 6, 3, 3, 1, 2, 2, 1),
    (1, 8, 11, 13, 5, 5, 3, (2, 1), (2, 1, 0, 3), 1, 1),
    (1, 4, 17, 19, 5, 3, 3, 3, 1, 1, 1),
    (2, 8, 6, 7, 5, 3, 3, 1, 0, 1, 1),
    (1, 8, 5, 5, 40, 3, 3, 1, 1, 1, 1),
    (2, 16, 7, 9, 12, 3, 3, 1, 1, 1, 2),
    (1, 8, 20, 33, 8, 1, 1, 2, 0, 1, 1),
]


@pytest.mark.parametrize("case", ALGO_CASES)
@pytest.mark.parametrize("algorithm", ["packed", "direct"])
@pytest.mark.parametrize("in_dtype,in_zp,relu", [(np.uint8, 117, False), (np.int8, -3, True)])
def test_conv2d_algorithms(case, algorithm, in_dtype, in_zp, relu):
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 5)
    x, wt, bias, mult, shift, geom, groups = _case(rng, case, in_dtype)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 64, relu, np.uint8)
    check_quant(lambda: K.conv2d(x, in_zp, packed, *args, **geom, algorithm=algorithm),
                lambda: R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))


def test_conv2d_algorithm_errors():
    packed = K.pack_weights(np.zeros((4, 3, 3, 3), np.int8))
    x = np.zeros((1, 3, 5, 5), np.uint8)
    with pytest.raises(ValueError, match="direct algorithm needs C/groups divisible by 4, got 3"):
        K.conv2d(x, 0, packed, 0, 1 << 30, 31, 0, False, np.uint8, algorithm="direct")
    with pytest.raises(ValueError, match="unknown algorithm 'winograd'"):
        K.conv2d(x, 0, packed, 0, 1 << 30, 31, 0, False, np.uint8, algorithm="winograd")


# The narrow form (framework/csrc/int8_cgemm.h, NarrowWeights): the AVX2 tile without VNNI
# sums u8 x s8 pairs with vpmaddubsw, exact only while a pair has |w0| + |w1| <= 128; pairs
# past it are clamped to [-64, 64] and the rest added from a sparse residual. 7-bit weights
# (reduce_range; rows of all +64 and all -64) have none; full-range ones (rows of all 127 and
# all -128 beside uniform ones) put most quads in it. Activations 0 and 255 side by side.
NARROW_CASES = [c for c in ALGO_CASES if c[1] != c[10]][:12] + [CASES[0], CASES[2], CASES[14]]


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
    monkeypatch.setattr(K, "NARROW_MAX_RESIDUAL", 1.0)  # whatever the residual costs
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 13)
    x, wt, bias, mult, shift, geom, groups = _case(rng, case, in_dtype)
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
    monkeypatch.setattr(K, "NARROW_MAX_RESIDUAL", 1.0)
    rng = np.random.default_rng(width * 31 + oc + bits + n)
    case = (n, 8, 1, width, oc, 3, 3, 1, 1, 1, 1)
    x, wt, bias, mult, shift, geom, groups = _case(rng, case, np.uint8)
    wt, x = _narrow(rng, wt, x, np.uint8, bits)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 64, False, np.uint8)
    for algorithm in ("packed", "direct"):
        check_quant(lambda: K.conv2d(x, 117, packed, *args, **geom, algorithm=algorithm),
                    lambda: R.qconv2d(x, 117, wt, *args, groups=groups, **geom))


def _guarded(data):
    """A copy of `data` whose last byte is the last of a page that is followed by an
    unreadable one: a kernel that reads past the array faults. (array, buffer to keep)"""
    import ctypes
    import mmap
    nbytes, page = data.nbytes, mmap.PAGESIZE
    span = -(-nbytes // page) * page
    buf = mmap.mmap(-1, span + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(base + span, page, 0) == 0, ctypes.get_errno()
    out = np.frombuffer(buf, data.dtype, count=data.size, offset=span - nbytes)
    out = out.reshape(data.shape)
    out[...] = data
    return out, buf


# Convolutions that read the caller's tensor in place (no padding, u8 input): 1x1 at strides
# 1 and 2, C not a multiple of 4 (gathered blocks), quad planes (strides 1 and 2: AVX2 reads
# a stride-2 row 32 bytes a step), depthwise; shapes whose
# last rows end on the input's last byte. Then padded copies of it: gathered blocks (rows
# wider and narrower than the AVX2 pad's 32-byte steps, which read on past a row's end but
# not past the input's) and depthwise planes.
@pytest.mark.parametrize("case", [(1, 3, 9, 70, 8, 1, 1, 1, 0, 1, 1),
                                  (2, 5, 7, 65, 7, 1, 1, 2, 0, 1, 1),
                                  (1, 3, 11, 67, 6, 3, 3, 2, 0, 1, 1),
                                  (1, 8, 9, 66, 5, 3, 3, 1, 0, 1, 1),
                                  (1, 4, 9, 67, 4, 3, 3, 2, 0, 1, 4),
                                  (1, 8, 9, 64, 5, 3, 3, 2, 0, 1, 1),
                                  (1, 3, 9, 70, 8, 3, 3, 1, 1, 1, 1),
                                  (2, 3, 7, 7, 5, 3, 3, 2, 1, 1, 1),
                                  (1, 4, 9, 67, 4, 3, 3, 1, 1, 1, 4),
                                  (1, 6, 5, 5, 6, 3, 3, 2, (1, 2, 1, 2), 1, 6)])
def test_conv2d_reads_nothing_past_the_input(case):
    rng = np.random.default_rng(17)
    _, wt, bias, mult, shift, geom, groups = _case(rng, case, np.uint8)
    x, keep = _guarded(rng.integers(0, 256, case[:4], dtype=np.uint8))
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 64, False, np.uint8)
    for algorithm in ("packed", "direct") if case[1] // groups % 4 == 0 else ("packed",):
        check_quant(lambda: K.conv2d(x, 5, packed, *args, **geom, algorithm=algorithm),
                    lambda: R.qconv2d(x, 5, wt, *args, groups=groups, **geom))
    del x, keep


@pytest.mark.parametrize("width", [1, 3, 11])
def test_conv2d_narrow_tail_reads_nothing_past_the_weights(width):
    """The few-position kernel loads a k-quad's 6 channels as 8 lanes: in a block of 1
    channel at the end of the weights, the lanes past it must not be read from past the end
    (the narrow form placed before an unreadable page)."""
    rng = np.random.default_rng(19)
    case = (1, 8, 1, width, 7, 3, 3, 1, 1, 1, 1)
    x, wt, bias, mult, shift, geom, groups = _case(rng, case, np.uint8)
    wt, x = _narrow(rng, wt, x, np.uint8, 7)
    packed = K.pack_weights(wt, groups)
    form = packed.narrow
    if form is None:
        pytest.skip("no narrow form on this ISA path")
    bytes_, keep = _guarded(form[0])
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


# The AMX algorithm (framework/csrc/int8_amx.h): on the real tiles where the OS grants them,
# on emulated ones elsewhere. Rows wider than 64 columns (the NHWC transpose's full blocks),
# strides 2 and 3, dilation, asymmetric padding, 1x1, several channel blocks and images.
AMX_CASES = [
    (1, 64, 5, 5, 32, 3, 3, 1, 1, 1, 1),
    (2, 64, 9, 11, 64, 3, 3, 2, 1, 1, 1),
    (1, 128, 7, 7, 32, 1, 1, 1, 0, 1, 1),
    (1, 64, 6, 40, 32, 3, 3, 1, (0, 2, 1, 1), (1, 2), 1),
    (2, 64, 3, 3, 96, 3, 3, 1, 1, 1, 1),
    (1, 64, 4, 70, 32, 3, 3, 1, 1, 1, 1),
    (1, 64, 3, 140, 32, 3, 3, 3, 1, 1, 1),
    (1, 64, 5, 131, 32, 1, 1, 2, 0, 1, 1),
]
# The store requantizes 16 channels at once, on s32 lanes where every shift is >= 32, else on
# s64 ones: scales whose shifts are 29-31 and 32-42 side by side in one 16-channel block.
AMX_MIXED_SCALES = [3.0, 1e-3, 0.4, 0.9, 2e-4, 1.7, 0.6]
needs_avx512 = pytest.mark.skipif(
    "avx512" not in available_isas() or not _C.cpu_features()["avx512_vbmi"],
    reason="the amx algorithm's store needs AVX-512 with VBMI")


@needs_avx512
@pytest.mark.parametrize("case", AMX_CASES)
@pytest.mark.parametrize("in_dtype,in_zp,relu", [(np.uint8, 117, False), (np.int8, -3, True)])
@pytest.mark.parametrize("scales", [None, AMX_MIXED_SCALES])
def test_conv2d_amx(case, in_dtype, in_zp, relu, scales):
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 9)
    x, wt, bias, mult, shift, geom, groups = _case(rng, case, in_dtype, scales)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 64, relu, np.uint8)
    got = K.conv2d(x, in_zp, packed, *args, **geom, algorithm="amx")
    np.testing.assert_array_equal(got, R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))


def test_packed_weights_aligned():
    # the kernels read packed weights in 64-byte rows from a 64-byte boundary, copies too
    import copy
    import pickle
    packed = K.pack_weights(np.ones((64, 64, 3, 3), np.int8))
    amx = "avx512" in available_isas()  # the AMX packing is built with AVX-512 flags
    for p in (packed, copy.deepcopy(packed), pickle.loads(pickle.dumps(packed))):
        for buf in (p.packed, p.amx) if amx else (p.packed,):
            assert buf.ctypes.data % 64 == 0
        np.testing.assert_array_equal(p.packed, packed.packed)


@needs_avx512
def test_conv2d_amx_errors():
    packed = K.pack_weights(np.zeros((32, 48, 3, 3), np.int8))
    assert packed.amx is None and K.pack_weights(np.zeros((32, 64, 1, 1), np.int8)).amx.size
    with pytest.raises(ValueError, match="amx algorithm needs groups 1, C a multiple of 64"):
        K.conv2d(np.zeros((1, 48, 5, 5), np.uint8), 0, packed, 0, 1 << 30, 31, 0, False,
                 np.uint8, algorithm="amx")
