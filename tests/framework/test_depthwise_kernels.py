"""The depthwise kernels (framework/csrc/depthwise*.cpp: the row and plane kernels, AVX-512's
flat plans, AVX2's kernels with the channels in the lanes) against their numpy twins on every
ISA path this machine has."""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from helpers import check_op, close, each_isa
from tianyuan import _C
from tianyuan.ops.conv_ref import (conv2d_ref, depthwise_backward_input_ref,
                                   depthwise_backward_weight_ref, depthwise_conv2d_ref)

# (x shape, kernel, stride, padding (t, b, l, r), dilation): odd widths, 1x1 images,
# channels not divisible by 16, asymmetric padding, dilation, strides 1, 2, 3
DEPTHWISE = [
    ((2, 5, 9, 11), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 17, 8, 7), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((3, 3, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 4, 13, 40), (5, 5), (2, 2), (2, 1, 0, 3), (1, 2)),
    ((1, 2, 37, 70), (3, 3), (3, 2), (0, 2, 1, 0), (2, 1)),
    ((1, 19, 33, 35), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 6, 5), (1, 7), (1, 1), (0, 0, 3, 3), (1, 1)),
    # stride 1, rows of >= 16 outputs: full 16-lane steps at both edges and inside
    ((2, 5, 6, 37), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 7, 50), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    ((1, 2, 9, 41), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    ((1, 4, 5, 32), (3, 3), (1, 1), (0, 1, 0, 2), (1, 1)),
    # AVX-512 runs planes up to 128x128 with kernels up to 5x5 flat, the rest row by row
    ((1, 2, 9, 9), (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),
    ((1, 1, 130, 131), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 3, 260, 9), (3, 3), (2, 1), (1, 1, 1, 1), (1, 1)),
    # stride 2 with out_w == ceil(w / 2): flat over the input's four quarters
    ((2, 3, 56, 56), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 2, 14, 14), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    ((1, 3, 8, 8), (3, 3), (2, 2), (0, 1, 0, 1), (1, 1)),
    ((1, 2, 9, 10), (3, 3), (2, 2), (1, 1, 2, 0), (1, 1)),
]
# AVX2's forward with 8 channels in the lanes (depthwise_lanes_avx2.cpp; also the stride-1
# input gradient, the forward of gy): 8 channels or more, as many (image, block of 8) pairs
# as threads, stride 2 or maps up to 28x28; its weight gradient from 8 channels on. A
# part-filled last block, 5x5, dilation with asymmetric padding, a 1x1 kernel on 33 positions
# (transposes with tails), stride 2 on a 56x56 map, stride 1 on one (the weight gradient).
DEPTHWISE_LANES = [
    ((2, 20, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 16, 9, 11), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    ((2, 9, 10, 9), (3, 3), (1, 1), (2, 1, 0, 2), (2, 1)),
    ((2, 12, 3, 11), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((1, 24, 56, 56), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 10, 40, 33), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
]


@pytest.mark.parametrize("shape,kernel,stride,padding,dilation", DEPTHWISE)
def test_depthwise_kernels_match_numpy_twins_on_every_isa(shape, kernel, stride, padding,
                                                          dilation):
    check_depthwise(shape, kernel, stride, padding, dilation)


@pytest.mark.parametrize("shape,kernel,stride,padding,dilation", DEPTHWISE_LANES)
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_lanes_match_numpy_twins(shape, kernel, stride, padding, dilation, threads):
    before = ty.get_num_threads()
    try:
        ty.set_num_threads(threads)
        check_depthwise(shape, kernel, stride, padding, dilation)
    finally:
        ty.set_num_threads(before)


@pytest.mark.parametrize("shape,kernel,stride,padding,dilation", DEPTHWISE_LANES[:2])
def test_depthwise_weight_gradient_bits_whatever_the_threads(shape, kernel, stride, padding,
                                                             dilation):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    geo = (stride, padding, dilation)
    gy = rng.standard_normal(depthwise_conv2d_ref(x, rng.standard_normal(
        (shape[1], 1) + kernel).astype(np.float32), None, *geo).shape).astype(np.float32)
    before = ty.get_num_threads()
    try:
        for isa in each_isa():
            got = []
            for threads in (1, 2):
                ty.set_num_threads(threads)
                got.append(_C.depthwise_conv2d_backward_weight(x, gy, kernel, *geo))
            np.testing.assert_array_equal(got[0], got[1], err_msg=isa)
    finally:
        ty.set_num_threads(before)


def check_depthwise(shape, kernel, stride, padding, dilation):
    """The three depthwise kernels against their numpy twins on every ISA path here."""
    rng = np.random.default_rng(1)
    c = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((c, 1) + kernel).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    geo = (stride, padding, dilation)
    want = depthwise_conv2d_ref(x, w, b, *geo)
    np.testing.assert_allclose(want, conv2d_ref(x, w, b, *geo, groups=c), rtol=1e-5, atol=1e-5)
    gy = rng.standard_normal(want.shape).astype(np.float32)
    want_gx = depthwise_backward_input_ref(gy, w, shape, *geo)
    want_gw = depthwise_backward_weight_ref(x, gy, kernel, *geo)
    for isa in each_isa():
        close(_C.depthwise_conv2d(x, w, b, *geo), want, f"forward, {isa}")
        close(_C.depthwise_conv2d_backward_input(gy, w, shape, *geo), want_gx, f"gx, {isa}")
        close(_C.depthwise_conv2d_backward_weight(x, gy, kernel, *geo), want_gw, f"gw, {isa}")


def test_depthwise_conv2d_gradients_float64():
    # float64 runs the generic kernels: finite differences check the whole primitive
    check_op(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=(1, 2), groups=3),
             lambda x, w, b: conv2d_ref(x, w, b, (2, 2), (1, 1, 2, 2), groups=3),
             [(2, 3, 5, 6), (3, 1, 3, 3), (3,)])


def test_depthwise_binding_rejects_bad_arguments():
    x = np.zeros((1, 4, 5, 5), np.float32)
    with pytest.raises(ValueError, match=r"depthwise_conv2d: weight must be \(4, 1, kh, kw\)"):
        _C.depthwise_conv2d(x, np.zeros((4, 2, 3, 3), np.float32), None, (1, 1), (0,) * 4, (1, 1))
    with pytest.raises(ValueError, match="depthwise_conv2d: bias must be"):
        _C.depthwise_conv2d(x, np.zeros((4, 1, 3, 3), np.float32), np.zeros(3, np.float32),
                            (1, 1), (0,) * 4, (1, 1))
