"""The int8 convolution on AMX tiles (framework/csrc/int8_amx/int8_amx.h), both algorithms: the NHWC
planes' (amx) and the packed blocks' (packed_amx), bit-exact to the numpy reference on the
real tiles where the OS grants them and on emulated ones elsewhere."""
import numpy as np
import pytest
from conv_cases import conv_case, needs_avx512

from tianyuan import _C
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R
from tianyuan.quantization.layout import is_channels_last, to_channels_last

# The AMX algorithm (framework/csrc/int8_amx/int8_amx.h): on the real tiles where the OS grants them,
# on emulated ones elsewhere. Rows wider than 64 columns (the NHWC transpose's full blocks),
# strides 2 and 3, dilation, asymmetric padding, 1x1, several channel blocks and images; at
# stride 2 both column phases from one pass (rows of 1, 2 and 3 blocks of 64 padded columns,
# odd padded widths, padding on one side) and only the even ones (dilation 2, a 1x1 layer).
# Blocks of at most 24 KB of weights in groups past 32 KB pass windows of 16 position blocks
# a channel block: 64 -> 64 channels over 40 position blocks (windows of 16, 16, 8; the second
# thread starting inside the second); 512 channels: two groups, the last of one block.
AMX_CASES = [
    (1, 64, 5, 5, 32, 3, 3, 1, 1, 1, 1),
    (2, 64, 9, 11, 64, 3, 3, 2, 1, 1, 1),
    (1, 64, 6, 139, 32, 3, 3, 2, (1, 0, 0, 2), 1, 1),
    (1, 128, 5, 64, 32, 3, 2, (2, 2), (0, 1, 1, 0), 1, 1),
    (1, 64, 7, 9, 32, 3, 3, (1, 2), 2, 2, 1),
    (1, 128, 7, 7, 32, 1, 1, 1, 0, 1, 1),
    (1, 64, 6, 40, 32, 3, 3, 1, (0, 2, 1, 1), (1, 2), 1),
    (2, 64, 3, 3, 96, 3, 3, 1, 1, 1, 1),
    (1, 64, 4, 70, 32, 3, 3, 1, 1, 1, 1),
    (1, 64, 3, 140, 32, 3, 3, 3, 1, 1, 1),
    (1, 64, 5, 131, 32, 1, 1, 2, 0, 1, 1),
    (2, 64, 20, 30, 64, 3, 3, 1, 1, 1, 1),
    (1, 512, 4, 5, 128, 3, 3, 1, 1, 1, 1),
]
# The store requantizes 16 channels at once, on s32 lanes where every shift is >= 32, else on
# s64 ones: scales whose shifts are 29-31 and 32-42 side by side in one 16-channel block.
AMX_MIXED_SCALES = [3.0, 1e-3, 0.4, 0.9, 2e-4, 1.7, 0.6]



# The packed algorithm's blocks on AMX tiles (int8_amx.h, amx_gemm_block): the stem (C 3, K
# 147: three chunks, the last one's quads past K read), K of exactly 64, C / groups a multiple
# of 4 with taps (blocks copied from the quad planes), blocks that span images (staged) and
# last blocks of fewer than 32 and than 16 positions, 16 to 128 channels (up to 4 chunks of 32,
# each stored during the next one's tile steps, a block's last during the next block's; OC not
# a multiple of 32: the last chunk's rows past OC computed, not stored), 1x1 layers at
# strides 1 and 2.
PACKED_AMX_CASES = [
    (1, 3, 23, 29, 32, 7, 7, 2, 3, 1, 1),
    (2, 3, 9, 11, 64, 7, 7, 2, 3, 1, 1),
    (3, 64, 5, 3, 32, 1, 1, 1, 0, 1, 1),
    (1, 24, 9, 13, 96, 3, 3, 1, 1, 1, 1),
    (2, 5, 6, 7, 32, 3, 3, 1, 0, 2, 1),
    (1, 16, 4, 5, 32, 1, 1, 1, 0, 1, 1),
    (3, 96, 7, 7, 128, 1, 1, 1, 0, 1, 1),
    (2, 64, 9, 11, 64, 1, 1, 2, 0, 1, 1),
    (2, 58, 6, 7, 58, 1, 1, 1, 0, 1, 1),
    (1, 24, 9, 9, 16, 1, 1, 1, 0, 1, 1),
]


@needs_avx512
@pytest.mark.parametrize("case,algorithm", [(c, "amx") for c in AMX_CASES] +
                         [(c, "packed_amx") for c in PACKED_AMX_CASES])
@pytest.mark.parametrize("in_dtype,in_zp,relu,out_dtype,out_zp",
                         [(np.uint8, 117, False, np.uint8, 64), (np.int8, -3, True, np.uint8, 64),
                          (np.uint8, 30, False, np.int8, -7)])
@pytest.mark.parametrize("scales", [None, AMX_MIXED_SCALES])
def test_conv2d_amx(case, algorithm, in_dtype, in_zp, relu, out_dtype, out_zp, scales):
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 9)
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, in_dtype, scales)
    packed = K.pack_weights(wt, groups)
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    got = K.conv2d(x, in_zp, packed, *args, **geom, algorithm=algorithm)
    np.testing.assert_array_equal(got, R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))


@needs_avx512
@pytest.mark.parametrize("case", AMX_CASES)
@pytest.mark.parametrize("relu,out_dtype,out_zp", [(False, np.uint8, 64), (True, np.int8, -7)])
@pytest.mark.parametrize("scales", [None, AMX_MIXED_SCALES])
def test_conv2d_amx_channels_last(case, relu, out_dtype, out_zp, scales):
    # The AMX algorithm on channels-last activations (PreparedConv.channels_last): the planes
    # copied from channels-last rows (packed pixels: one run a row; a cropped view: pixel by
    # pixel) or transposed from C-contiguous ones, the accumulator rows stored as each
    # position's run of channels (channels-last out, positions past a row's end dropped).
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 10)
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, np.uint8, scales)
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    want = R.qconv2d(x, 117, wt, *args, groups=groups, **geom)
    conv = K.PreparedConv(K.pack_weights(wt, groups), *args, **geom, algorithm="amx")
    padded = np.pad(x, ((0, 0), (0, 0), (1, 0), (2, 1)), constant_values=9)
    crop = to_channels_last(padded)[:, :, 1:, 2:-1]
    for name, xi in (("packed", to_channels_last(x)), ("cropped", crop), ("NCHW", x)):
        got = conv.channels_last(xi, 117)
        assert is_channels_last(got), name
        np.testing.assert_array_equal(got, want, err_msg=f"{name} input")


# The rows form (int8_rows_amx.cpp, channels-last out from C-contiguous x): the stem (R = 3
# rows of 3 channels a column, 3 chunks), one and two images, a last pair of one unit (odd
# units per image) and units past a row's end, C a multiple of 4 (the packed weights' other K
# order), R = 1 and 2, strides (2, 1), asymmetric padding, 96 output channels (3 blocks).
ROWS_CASES = [
    (1, 3, 23, 29, 32, 7, 7, 2, 3, 1, 1),
    (2, 3, 9, 11, 64, 7, 7, 2, 3, 1, 1),
    (3, 3, 31, 17, 32, 7, 7, 2, 3, 1, 1),
    (1, 3, 8, 40, 32, 3, 3, 1, 1, 1, 1),
    (2, 4, 7, 9, 96, 5, 5, 1, (2, 0, 1, 2), 1, 1),
    (1, 1, 6, 50, 32, 3, 3, 2, 0, 1, 1),
    (1, 2, 5, 70, 64, 2, 3, (2, 1), 1, 1, 1),
    (1, 16, 6, 7, 32, 3, 3, 1, 1, 1, 1),
    (1, 8, 5, 9, 32, 2, 5, 1, (0, 1, 2, 2), 1, 1),
]


@needs_avx512
@pytest.mark.parametrize("case", ROWS_CASES)
@pytest.mark.parametrize("relu,out_dtype,out_zp", [(False, np.uint8, 64), (True, np.int8, -7)])
@pytest.mark.parametrize("scales", [None, AMX_MIXED_SCALES])
def test_conv2d_amx_rows(case, relu, out_dtype, out_zp, scales):
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 11)
    x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, np.uint8, scales)
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    want = R.qconv2d(x, 117, wt, *args, groups=groups, **geom)
    for algorithm in ("amx", "auto"):   # forced: the rows form; auto: whatever runs
        conv = K.PreparedConv(K.pack_weights(wt, groups), *args, **geom, algorithm=algorithm)
        got = conv.channels_last(x, 117)
        assert is_channels_last(got)
        np.testing.assert_array_equal(got, want, err_msg=algorithm)


@pytest.mark.skipif(not _C.cpu_features()["os_amx"], reason="the OS grants no AMX tiles")
def test_amx_tiles_match_their_emulation():
    # where the OS grants tiles, the tests above run the real ones; this is the emulated tiles'
    # check there (both algorithms: TDPBUSD's and TDPBSUD's), which the automatic choice needs
    assert _C.testing.int8_amx_verified()


@needs_avx512
def test_amx_window():
    # The AMX store's masked runs (int8_amx.h, AmxWindow): every real position of a window of
    # 16 virtual ones (rows of wph, the first ow real, nv in all) in exactly one run, at its
    # NCHW offset oy * ow + ox; the dropped ones (columns ow.., past nv) in none. Stray bytes
    # past a row's end would land on the next row's start, which a later item may overwrite:
    # the convolution tests alone need not see them.
    for wph in (1, 2, 3, 5, 9, 16, 17, 30, 58, 70):
        for ow in sorted({1, max(1, wph - 2), wph - 1 or 1, wph}):
            for oh in (1, 2, 7):
                nv = (oh - 1) * wph + ow
                for v in range(0, nv + 16, 16):
                    runs = _C.testing.int8_amx_window(v, wph, ow, nv)
                    for i in range(16):
                        p = v + i
                        real = p < nv and p % wph < ow
                        hits = [off + i for off, mask in runs if mask >> i & 1]
                        assert hits == ([p // wph * ow + p % wph] if real else []), \
                            (wph, ow, nv, v, i, runs)


def test_amx_offsets():
    # The channels-last store's offsets (int8_amx.h, amx_offsets): each real position of 32
    # virtual ones at (oy * ow + ox) * oc, the dropped ones (columns ow.., past nv) -1. A
    # stray offset would write the next row's (or image's, or past the output's end) first
    # position, which a later item may overwrite: the convolution tests alone need not see it.
    for wph in (1, 2, 3, 9, 17, 33, 58, 70):
        for ow in sorted({1, max(1, wph - 2), wph - 1 or 1, wph}):
            for oh in (1, 2, 7):
                nv = (oh - 1) * wph + ow
                for v in range(0, nv + 32, 32):
                    want = [(p // wph * ow + p % wph) * 64 if p < nv and p % wph < ow else -1
                            for p in range(v, v + 32)]
                    assert _C.testing.int8_amx_offsets(v, wph, ow, nv, 64) == want, (wph, ow, nv, v)


@needs_avx512
def test_conv2d_amx_errors():
    packed = K.pack_weights(np.zeros((32, 48, 3, 3), np.int8))
    assert packed.amx is None and K.pack_weights(np.zeros((32, 64, 1, 1), np.int8)).amx.size
    with pytest.raises(ValueError, match="amx algorithm needs groups 1, C a multiple of 64"):
        K.conv2d(np.zeros((1, 48, 5, 5), np.uint8), 0, packed, 0, 1 << 30, 31, 0, False,
                 np.uint8, algorithm="amx")
    with pytest.raises(ValueError, match="packed_amx algorithm needs groups 1, .*; got groups 2, "
                                         "AVX-512 yes"):
        K.conv2d(np.zeros((1, 4, 5, 5), np.uint8), 0, K.pack_weights(np.zeros((16, 2, 3, 3),
                 np.int8), 2), 0, 1 << 30, 31, 0, False, np.uint8, algorithm="packed_amx")
