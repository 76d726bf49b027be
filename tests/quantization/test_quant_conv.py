"""Native int8 conv2d (packed and direct algorithms, grouped, depthwise): bit-exact on every
ISA path. The AMX algorithms: test_quant_conv_amx.py."""
import numpy as np
import pytest
from conv_cases import ALGO_CASES, CASES, LANES_CASES, conv_case, needs_avx512
from helpers import check_quant, guarded_copy

import tianyuan as ty
from tianyuan import available_isas
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("in_dtype,in_zp,out_dtype,out_zp",
                         [(np.uint8, 117, np.uint8, 64), (np.int8, 0, np.int8, 0),
                          (np.int8, -3, np.uint8, 128)])
def test_conv2d(case, relu, in_dtype, in_zp, out_dtype, out_zp):
    rng = np.random.default_rng(sum(np.ravel(case[:7])))
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, in_dtype)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    check_quant(lambda: K.conv2d(x, in_zp, packed, *args, **geom),
                lambda: R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))


@pytest.mark.parametrize("case", LANES_CASES)
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_lanes(case, threads):
    """The depthwise cases of 16 channels and more on 1 and 2 threads, where AVX2 runs every
    (image, block of 16 channels) pair as a task: u8 in, u8 out with ReLU6's clamp, shifts
    above 33 (the s32 form), the input ending on a readable page's last byte; the same without
    a clamp (the zero point on the rounding half, the packs' saturation as the clamp); s8 in
    and out, shifts on both sides of 33 (per-lane s64 form)."""
    rng = np.random.default_rng(sum(np.ravel(case[:7])))
    before = ty.get_num_threads()
    try:
        ty.set_num_threads(threads)
        for in_dtype, in_zp, out_dtype, out_zp, relu, scales in (
                (np.uint8, 201, np.uint8, 9, True, None),
                (np.uint8, 201, np.uint8, 9, False, None),
                (np.int8, -7, np.int8, -5, False, [0.02, 0.3, 1.3])):
            x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, in_dtype, scales)
            x, keep = guarded_copy(x)
            if scales is not None:
                wt, bias = (wt // 64).astype(np.int8), bias // 64
            packed = K.pack_weights(wt, groups)
            args = (bias, mult, shift, out_zp, relu, out_dtype)
            top = 150 if relu else R.qrange(out_dtype)[1]
            check_quant(lambda: K.conv2d(x, in_zp, packed, *args, **geom, out_max=top),
                        lambda: np.minimum(R.qconv2d(x, in_zp, wt, *args, groups=groups,
                                                     **geom), top))
            del x, keep
    finally:
        ty.set_num_threads(before)


@pytest.mark.parametrize("case", [CASES[3], CASES[9], CASES[-2]])
def test_conv2d_out_max_is_relu6_clamp(case):
    rng = np.random.default_rng(7)
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, np.uint8)
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
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, np.uint8, scales)
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


@pytest.mark.parametrize("depthwise", [False, True])
def test_prepared_conv_copies_and_pickles(depthwise):
    """A PreparedConv holds a native _C.Int8Conv; copies and pickles make it anew, and the
    copy computes what the original does."""
    import copy
    import pickle
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (8, 1 if depthwise else 8, 3, 3), dtype=np.int8)
    packed = K.pack_weights(w, groups=8 if depthwise else 1)
    mult, shift = R.quantize_multiplier(np.full(8, 0.003))
    conv = K.PreparedConv(packed, np.arange(8, dtype=np.int32), mult, shift, 5, True, np.uint8,
                          padding=1)
    x = rng.integers(0, 256, (2, 8, 6, 7), dtype=np.uint8)
    want = R.qconv2d(x, 3, w, np.arange(8), mult, shift, 5, True, np.uint8, padding=1,
                     groups=8 if depthwise else 1)
    for other in (conv, copy.deepcopy(conv), pickle.loads(pickle.dumps(conv))):
        np.testing.assert_array_equal(other(x, 3), want)


def test_conv2d_checks_shapes():
    packed = K.pack_weights(np.zeros((4, 3, 3, 3), np.int8))
    with pytest.raises(ValueError, match="conv2d"):
        K.conv2d(np.zeros((1, 2, 5, 5), np.uint8), 0, packed, 0, 1 << 30, 31, 0, False, np.uint8)


@pytest.mark.parametrize("geom,says", [
    (dict(stride=0), r"stride \(0, 0\).*must be >= 1"),   # had divided by the stride: SIGFPE
    (dict(padding=-1), r"padding \(-1, -1, -1, -1\)"),
    (dict(dilation=3), "larger than the padded input"),
])
def test_conv2d_geometry_errors_name_the_shapes(geom, says):
    packed = K.pack_weights(np.zeros((4, 3, 3, 3), np.int8))
    mult, shift = R.quantize_multiplier(np.full(4, 0.01))
    with pytest.raises(ValueError, match=r"int8_conv2d: input \(1, 3, 5, 5\), weights "
                                         r"\(4, 3, 3, 3\).*" + says):
        K.conv2d(np.zeros((1, 3, 5, 5), np.uint8), 0, packed, np.zeros(4, np.int32), mult, shift,
                 0, False, np.uint8, **geom)


@pytest.mark.parametrize("case", ALGO_CASES)
@pytest.mark.parametrize("algorithm", ["packed", "direct"])
@pytest.mark.parametrize("in_dtype,in_zp,relu", [(np.uint8, 117, False), (np.int8, -3, True)])
def test_conv2d_algorithms(case, algorithm, in_dtype, in_zp, relu):
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 5)
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, in_dtype)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 64, relu, np.uint8)
    check_quant(lambda: K.conv2d(x, in_zp, packed, *args, **geom, algorithm=algorithm),
                lambda: R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))


# Quad planes or padded input an image at a time in each thread's own buffer: the direct
# algorithm with whole images a thread (a batch of a multiple of the threads, 16 or more blocks
# a thread); packed blocks from a ring of images (2 or more images a thread; 7x7 and stride-2
# maps, whose blocks span 3 images, groups; gathered from padded copies: 3 channels, a 7x7
# stem, a 1x1 layer whose s8 input is copied flipped). On 2 threads a batch of 3 runs direct
# from the batch's planes, shared.
@pytest.mark.parametrize("algorithm,case", [
    ("direct", (2, 8, 24, 40, 7, 3, 3, 1, 1, 1, 1)),
    ("direct", (4, 16, 12, 30, 12, 3, 3, 1, 1, 1, 2)),
    ("direct", (4, 8, 40, 42, 6, 3, 3, 2, 1, 1, 1)),
    ("direct", (3, 8, 24, 40, 7, 3, 3, 1, 1, 1, 1)),
    ("packed", (4, 8, 7, 7, 10, 3, 3, 1, 1, 1, 1)),
    ("packed", (5, 8, 12, 14, 6, 3, 3, 2, 1, 1, 1)),
    ("packed", (4, 16, 8, 8, 12, 3, 3, 1, 1, 1, 2)),
    ("packed", (4, 8, 12, 12, 6, 3, 3, 1, 1, 1, 1)),
    ("packed", (4, 3, 9, 10, 6, 3, 3, 2, 1, 1, 1)),
    ("packed", (4, 3, 20, 22, 8, 7, 7, 2, 3, 1, 1)),
    ("packed", (4, 8, 5, 7, 6, 1, 1, 1, 0, 1, 1))])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv2d_image_planes(algorithm, case, threads):
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 9)
    before = ty.get_num_threads()
    try:
        ty.set_num_threads(threads)
        for in_dtype, in_zp in ((np.uint8, 117), (np.int8, -3)):
            x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, in_dtype)
            packed = K.pack_weights(wt, groups)
            args = (bias, mult, shift, 64, True, np.uint8)
            check_quant(lambda: K.conv2d(x, in_zp, packed, *args, **geom, algorithm=algorithm),
                        lambda: R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))
    finally:
        ty.set_num_threads(before)


def test_conv2d_algorithm_errors():
    packed = K.pack_weights(np.zeros((4, 3, 3, 3), np.int8))
    x = np.zeros((1, 3, 5, 5), np.uint8)
    with pytest.raises(ValueError, match="direct algorithm needs C/groups divisible by 4, got 3"):
        K.conv2d(x, 0, packed, 0, 1 << 30, 31, 0, False, np.uint8, algorithm="direct")
    with pytest.raises(ValueError, match="unknown algorithm 'winograd'"):
        K.conv2d(x, 0, packed, 0, 1 << 30, 31, 0, False, np.uint8, algorithm="winograd")


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
    _, wt, bias, mult, shift, geom, groups = conv_case(rng, case, np.uint8)
    x, keep = guarded_copy(rng.integers(0, 256, case[:4], dtype=np.uint8))
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 64, False, np.uint8)
    for algorithm in ("packed", "direct") if case[1] // groups % 4 == 0 else ("packed",):
        check_quant(lambda: K.conv2d(x, 5, packed, *args, **geom, algorithm=algorithm),
                    lambda: R.qconv2d(x, 5, wt, *args, groups=groups, **geom))
    del x, keep


@pytest.mark.parametrize("out_dtype,out_zp,relu", [(np.uint8, 3, False), (np.uint8, 200, True),
                                                  (np.int8, -5, False), (np.int8, 100, True)])
@pytest.mark.parametrize("algorithm", ["auto", pytest.param("amx", marks=needs_avx512),
                                       pytest.param("packed_amx", marks=needs_avx512)])
def test_conv2d_requantization_saturates(out_dtype, out_zp, relu, algorithm):
    """Requantized values far outside the output range - past 16 bits and up to the s32 ends,
    both signs, every shift path (scales 0.9 to 3e-4: shifts 31 to 43) - clamp to the range
    exactly: the tiles' stores narrow through saturating 16-bit steps before their clamp."""
    rng = np.random.default_rng(5)
    x = np.full((1, 64, 5, 13), 255, np.uint8)
    x[0, :, 2] = rng.integers(0, 256, (64, 13))  # one row of ordinary values
    wt = np.where(np.arange(64)[:, None, None, None] % 2 == 0, 127, -128) * np.ones(
        (64, 64, 1, 1), np.int64)
    wt[::3, ::2] = -wt[::3, ::2]  # some channels mixed, nearer zero
    wt = wt.astype(np.int8)
    bias = rng.integers(-2 ** 30, 2 ** 30, 64).astype(np.int32)
    mult, shift = R.quantize_multiplier(np.geomspace(0.9, 3e-4, 64))
    packed = K.pack_weights(wt)
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    expected = R.qconv2d(x, 0, wt, *args)
    lo, hi = R.qrange(out_dtype)
    assert (expected == hi).any() and (expected == (out_zp if relu else lo)).any()
    check_quant(lambda: K.conv2d(x, 0, packed, *args, algorithm=algorithm), lambda: expected)


@pytest.mark.parametrize("out_dtype,out_zp,relu", [(np.uint8, 255, False), (np.uint8, 254, True),
                                                  (np.uint8, 0, False), (np.int8, -128, False),
                                                  (np.int8, 120, True)])
@pytest.mark.parametrize("kind", ["dense", "7-bit", "depthwise"])
def test_conv2d_requantization_large_shifts(out_dtype, out_zp, relu, kind):
    """Shifts 48 to 62 with t = acc + bias at both ends of int32 and multipliers near 2^31:
    the AVX2 stores add the zero point to the rounding half on the products' high halves,
    which stays within s32 for small shifts and zero points only (1 << (s - 33) plus
    zp << (s - 32) under 2^30); past that bound (zero points 254 and 255 from shift 55 on)
    they take the s64 form. The dense kind runs the wide AVX2 tile, 7-bit the narrow one."""
    rng = np.random.default_rng(9)
    c, taps = 16, 9
    depthwise = kind == "depthwise"
    x = np.full((1, c, 5, 21), 255, np.uint8)
    x[0, :, 2] = rng.integers(0, 256, (c, 21))  # one row of ordinary values
    top, bottom = (64, -64) if kind == "7-bit" else (127, -128)
    sign = np.where(np.arange(c) % 2 == 0, 1, -1)
    wt = (np.where(sign > 0, top, bottom)[:, None, None, None] *
          np.ones((c, 1 if depthwise else c, 3, 3), np.int64)).astype(np.int8)
    reach = 255 * -bottom * taps * (1 if depthwise else c)
    bias = np.where(sign > 0, 2 ** 31 - 1 - reach, -2 ** 31 + reach).astype(np.int32)
    mult = np.full(c, 2 ** 31 - 1, np.int32)
    shift = np.linspace(48, 62, c).astype(np.int32)
    groups = c if depthwise else 1
    packed = K.pack_weights(wt, groups)
    assert (packed.narrow is not None) == (kind == "7-bit")
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    expected = R.qconv2d(x, 0, wt, *args, groups=groups)
    lo, hi = R.qrange(out_dtype)
    assert ((expected > lo) & (expected < hi)).any()
    check_quant(lambda: K.conv2d(x, 0, packed, *args), lambda: expected)


def test_conv2d_runs_of_position_blocks():
    """A shallow 1x1 layer with a 9 MB output and 282 position blocks on 2 threads: the packed
    algorithm packs runs of 8 blocks a task and writes each output row a run at a time
    (kRunBlocks in int8_cgemm.cpp); blocks and runs that span two images among them."""
    rng = np.random.default_rng(3)
    before = ty.get_num_threads()
    try:
        ty.set_num_threads(2)
        case = (5, 8, 60, 60, 512, 1, 1, 1, 0, 1, 1)  # 3600 positions an image
        x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, np.uint8)
        packed = K.pack_weights(wt, groups)
        args = (bias, mult, shift, 5, True, np.uint8)
        check_quant(lambda: K.conv2d(x, 117, packed, *args, **geom),
                    lambda: R.qconv2d(x, 117, wt, *args, groups=groups, **geom))
    finally:
        ty.set_num_threads(before)


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


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("side", [7, 3])
def test_conv2d_packs_within_the_block(side, threads):
    """Maps 7 or 3 wide: a 64-position block's runs are rows, so the last one ends at lane 64
    and one before it starts at lane 56 (60), where a whole 64-byte (32-byte) step runs 8 (3)
    lanes past the block. In the block's last k-quad that step had gone past the pack buffer,
    into malloc's next chunk header (ResNet-18's 7x7 layers at batch 16 aborted in malloc
    some hundred calls later). check_quant asks the scratch canaries after each call."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (16, 8, side, side), dtype=np.uint8)
    wt = rng.integers(-128, 128, (6, 8, 3, 3), dtype=np.int8)
    bias = rng.integers(-2000, 2000, 6, dtype=np.int32)
    mult, shift = R.quantize_multiplier(np.full(6, 0.002))
    packed = K.pack_weights(wt, 1)
    args = (bias, mult, shift, 3, False, np.uint8)
    geom = dict(stride=1, padding=1)
    before = ty.get_num_threads()
    ty.set_num_threads(threads)
    try:
        check_quant(lambda: K.conv2d(x, 9, packed, *args, **geom, algorithm="packed"),
                    lambda: R.qconv2d(x, 9, wt, *args, groups=1, **geom))
    finally:
        ty.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2])
def test_conv2d_k_split_packs_stay_in_their_part(threads):
    """One block of 60 positions (12 rows of 5) whose k-quads the threads pack in parts
    (few blocks: plan's chunks). The run at lane 50 is not its k-quad's last, and a whole
    vector step from it had run past lane 63 into the next part's first k-quad, which another
    thread packs, with bytes of the wrong k-quad. 18 channels: 3 weight blocks, too few for
    each of 2 threads to pack the block itself (own_blocks_wins)."""
    rng = np.random.default_rng(8)
    x = rng.integers(0, 256, (1, 16, 12, 5), dtype=np.uint8)
    wt = rng.integers(-128, 128, (18, 16, 3, 3), dtype=np.int8)
    bias = rng.integers(-2000, 2000, 18, dtype=np.int32)
    mult, shift = R.quantize_multiplier(np.full(18, 0.002))
    packed = K.pack_weights(wt, 1)
    args = (bias, mult, shift, 3, False, np.uint8)
    before = ty.get_num_threads()
    ty.set_num_threads(threads)
    try:
        for _ in range(20):
            check_quant(lambda: K.conv2d(x, 9, packed, *args, stride=1, padding=1,
                                         algorithm="packed"),
                        lambda: R.qconv2d(x, 9, wt, *args, stride=1, padding=1))
    finally:
        ty.set_num_threads(before)


# Batch 1, small maps (own_blocks_wins in framework/csrc/int8_cgemm/int8_cgemm_plan.h): every thread packs
# all the position blocks and runs its share of the weight blocks (on 2 and 3 threads; 1 and 5
# run the other paths). A 1x1 layer that widens at 14x14 (4 blocks, the last of 4 positions; 41
# channels: 7 weight blocks, the last of 5 rows), a 3x3 one-block map copied from quad planes
# (40 channels), one gathered (C 6) with stride 2 and padding (37 channels).
OWN_CASES = [
    (1, 16, 14, 14, 41, 1, 1, 1, 0, 1, 1),
    (1, 8, 7, 7, 40, 3, 3, 1, 1, 1, 1),
    (1, 6, 11, 13, 37, 3, 3, 2, 1, 1, 1),
]


@pytest.mark.parametrize("case", OWN_CASES)
@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("in_dtype,in_zp", [(np.uint8, 117), (np.int8, -3)])
def test_conv2d_own_blocks(case, threads, in_dtype, in_zp):
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + threads)
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, in_dtype)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, 5, True, np.uint8)
    before = ty.get_num_threads()
    ty.set_num_threads(threads)
    try:
        check_quant(lambda: K.conv2d(x, in_zp, packed, *args, **geom, algorithm="packed"),
                    lambda: R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))
    finally:
        ty.set_num_threads(before)
