"""int8 convolutions on channels-last activations (framework/csrc/int8_conv/int8_conv_nhwc.h): bit-exact
to the reference on every ISA path, the result channels-last; the engine itself where it
runs (VNNI and AMX hosts, and the generic ISA), a C-contiguous copy elsewhere and for what it
does not take (groups, int8 input)."""
import numpy as np
import pytest
from conv_cases import ALGO_CASES, CASES, conv_case
from helpers import check_quant, each_isa

import tianyuan as ty
from tianyuan import _C
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R

# (N, C, H, W, OC, kh, kw, stride, padding, dilation, groups), groups 1: output channels past
# one block and a part-filled last block (1, 15, 17, 65 and 130 = 2 x 64 + 2), tiles over
# image ends (49 positions), only border tiles (3x3 maps), a kernel larger than the map,
# asymmetric padding, strides 2 and 3, dilation (taps as steps), 7x7, 1x1, a batch of 1 with
# fewer positions than 8 tiles a thread and 4 weight blocks (split by blocks), kernel rows with
# row dilation, C = 6 by taps. The CASES below add C = 3, 5, 7, 17... (rows of C % 4 != 0).
NHWC_CASES = [
    (2, 8, 7, 7, 1, 3, 3, 1, 1, 1, 1),
    (1, 4, 9, 11, 15, 3, 3, 1, 1, 1, 1),
    (3, 12, 5, 6, 17, 3, 3, 2, 1, 1, 1),
    (1, 64, 7, 7, 65, 3, 3, 1, 1, 1, 1),
    (2, 16, 3, 3, 130, 3, 3, 1, 1, 1, 1),
    (1, 8, 4, 5, 20, 7, 7, 1, 3, 1, 1),
    (1, 8, 10, 9, 24, 3, 3, 1, (2, 0, 1, 3), 1, 1),
    (2, 4, 13, 12, 40, 3, 3, 3, 1, 1, 1),
    (1, 8, 11, 11, 16, 3, 3, 1, 2, 2, 1),
    (1, 4, 16, 16, 64, 7, 7, 2, 3, 1, 1),
    (2, 32, 6, 6, 72, 1, 1, 1, 0, 1, 1),
    (1, 20, 9, 9, 33, 1, 1, 2, 0, 1, 1),
    (1, 16, 4, 4, 256, 3, 3, 1, 1, 1, 1),
    (2, 12, 9, 10, 24, 3, 3, (1, 2), 2, (2, 1), 1),  # kernel rows with row dilation, col stride 2
    (1, 6, 7, 9, 20, 3, 5, 1, (1, 1, 2, 2), (1, 2), 1),  # C 6, column dilation: taps
]


def _channels_last_views(x):
    """x (N, C, H, W) as channels-last arrays: packed; each pixel in C + 5 bytes (a slice of
    the channels); every other pixel of a row and rows 1.. of twice as many (a crop)."""
    n, c, h, w = x.shape
    wide = np.zeros((n, h, w, c + 5), x.dtype)
    wide[..., 2:c + 2] = x.transpose(0, 2, 3, 1)
    crop = np.zeros((n, h + 1, 2 * w, c), x.dtype)
    crop[:, 1:, ::2] = x.transpose(0, 2, 3, 1)
    return [K.to_channels_last(x), wide[..., 2:c + 2].transpose(0, 3, 1, 2),
            crop[:, 1:, ::2].transpose(0, 3, 1, 2)]


def _run_channels_last(x, zp, packed, args, geom):
    ys = []
    for view in _channels_last_views(x):
        assert K.is_channels_last(view) and np.array_equal(view, x)
        y = K.conv2d(view, zp, packed, *args, **geom)
        assert K.is_channels_last(y), f"{ty.current_isa()}: result strides {y.strides}"
        ys.append(y)
    for y in ys[1:]:
        np.testing.assert_array_equal(y, ys[0], err_msg=f"{ty.current_isa()}: a strided view")
    return ys[0]


@pytest.mark.parametrize("case", NHWC_CASES + CASES[:24] + ALGO_CASES[-6:])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv2d_channels_last(case, threads):
    """u8 in (the engine where it takes the conv), u8 out with ReLU6's clamp; s8 in (a copy),
    s8 out; shifts on both sides of 33 (the per-lane forms of the requantization); each as
    packed channels-last, pixels wider than their channels and a crop."""
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 3)
    before = ty.get_num_threads()
    try:
        ty.set_num_threads(threads)
        for in_dtype, in_zp, out_dtype, out_zp, relu, scales in (
                (np.uint8, 117, np.uint8, 64, True, None),
                (np.uint8, 3, np.int8, -5, False, [0.02, 0.3, 1.3]),
                (np.int8, -3, np.int8, 2, False, None)):
            x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, in_dtype, scales)
            if scales is not None:
                wt, bias = (wt // 64).astype(np.int8), bias // 64
            packed = K.pack_weights(wt, groups)
            args = (bias, mult, shift, out_zp, relu, out_dtype)
            top = 150 if relu else R.qrange(out_dtype)[1]
            check_quant(lambda: _run_channels_last(x, in_zp, packed, args,
                                                   dict(geom, out_max=top)),
                        lambda: np.minimum(R.qconv2d(x, in_zp, wt, *args, groups=groups,
                                                     **geom), top))
    finally:
        ty.set_num_threads(before)


@pytest.mark.parametrize("case", NHWC_CASES[:6] + [CASES[7], (2, 1, 9, 8, 20, 3, 3, 2, 1, 1, 1),
                                                  (1, 2, 6, 7, 70, 5, 4, 1, (2, 1, 0, 3), 1, 1)])
def test_channels_last_engine(case):
    """The native engine called directly, channels-last or C-contiguous NCHW in, (N, H, W, C)
    out, on the ISAs that run it: its VNNI tile on VNNI and AMX hosts, its generic one
    everywhere (TIANYUAN_ISA=generic)."""
    rng = np.random.default_rng(sum(np.ravel(case[:7])))
    x, wt, bias, mult, shift, geom, _ = conv_case(rng, case, np.uint8)
    packed = K.pack_weights(wt)
    want = R.qconv2d(x, 201, wt, bias, mult, shift, 7, False, np.uint8, **geom)
    inputs = [K.to_channels_last(x), x]  # x NCHW: copied channels-last, padded, by the engine
    ran = []
    for isa in each_isa():
        conv = K.PreparedConv(packed, bias, mult, shift, 7, False, np.uint8, **geom)
        assert conv.nhwc == (isa == "generic" or _C.int8_nhwc_fast())
        if not conv.nhwc:
            continue
        for view in inputs:
            got = conv.run.channels_last(view, 201)
            assert got.flags.c_contiguous and got.shape == want.transpose(0, 2, 3, 1).shape
            np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), want, err_msg=isa)
        ran.append(isa)
    assert "generic" in ran


@pytest.mark.parametrize("case", NHWC_CASES[:3] + [CASES[3], CASES[7], CASES[8], CASES[9]])
def test_prepared_conv_channels_last(case):
    """PreparedConv.channels_last: a channels-last result whatever the input's layout (NCHW
    inputs through a channels-last copy, natively; s8 input, grouped and depthwise convs on
    the NCHW algorithms and a copy)."""
    rng = np.random.default_rng(sum(np.ravel(case[:7])) + 5)
    for in_dtype, in_zp in ((np.uint8, 90), (np.int8, -4)):
        x, wt, bias, mult, shift, geom, groups = conv_case(rng, case, in_dtype)
        args = (bias, mult, shift, 3, True, np.uint8)
        conv = K.PreparedConv(K.pack_weights(wt, groups), *args, **geom)

        def native():
            y = conv.channels_last(x, in_zp)
            assert K.is_channels_last(y), f"{ty.current_isa()}: result strides {y.strides}"
            return y
        check_quant(native, lambda: R.qconv2d(x, in_zp, wt, *args, groups=groups, **geom))


def test_channels_last_takes_and_refuses():
    original = ty.current_isa()
    assert K.pack_weights(np.ones((8, 3, 3, 3), np.int8)).nhwc is not None  # C 3: in place
    assert K.pack_weights(np.ones((8, 1, 3, 3), np.int8), 8).nhwc is None  # depthwise
    grouped = K.PreparedConv(K.pack_weights(np.ones((8, 4, 3, 3), np.int8), 2), 0, 1 << 30, 33,
                             0, False, np.uint8)
    assert not grouped.nhwc
    with pytest.raises(ValueError, match=r"made without channels-last weights \(weights "
                                         r"\(8, 4, 3, 3\), groups 2"):
        grouped.run.channels_last(np.zeros((1, 8, 5, 5), np.uint8), 0)
    try:  # the engine's weights are made only where it may run: its tile's ISAs, generic
        if not _C.int8_nhwc_fast():
            ty.set_isa("generic")
        conv = K.PreparedConv(K.pack_weights(np.ones((8, 4, 3, 3), np.int8)), 0, 1 << 30, 33,
                              0, False, np.uint8, padding=1)
    finally:
        ty.set_isa(original)
    assert conv.nhwc
    with pytest.raises(ValueError, match=r"input must be uint8, got int8"):
        conv.run.channels_last(np.zeros((1, 4, 5, 5), np.int8), 0)
    with pytest.raises(ValueError, match=r"channels-last.*\(1, 3, 5, 5\)"):
        conv.run.channels_last(np.zeros((1, 3, 5, 5), np.uint8), 0)
    with pytest.raises(ValueError, match=r"must be \(N, C, H, W\)"):
        conv.run.channels_last(np.zeros((5, 5, 4), np.uint8), 0)
    with pytest.raises(ValueError, match=r"strides \(200, 50, 10, 2\) must have its channels "
                                         r"side by side, or be C-contiguous"):
        conv.run.channels_last(np.zeros((1, 4, 5, 10), np.uint8)[..., ::2], 0)
    with pytest.raises(ValueError, match=r"must be \(OC, C, kh, kw\)"):
        _C.int8_pack_conv_weights_nhwc(np.ones((8, 27), np.int8))


def test_channels_last_layout_helpers():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.uint8).reshape(2, 3, 4, 5)
    y = K.to_channels_last(x)
    assert K.is_channels_last(y) and not K.is_channels_last(x)
    np.testing.assert_array_equal(x, y)
    assert not K.is_channels_last(x[:, :, :2])  # a strided view of NCHW
    assert K.is_channels_last(y[:, :, 1:, ::2])  # a crop of channels-last
    assert not K.is_channels_last(x.reshape(6, 4, 5))
