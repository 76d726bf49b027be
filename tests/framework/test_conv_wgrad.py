"""The direct weight gradient (framework/csrc/conv/conv_wgrad.cpp, _C.conv2d_gemm_weight_grad)
against its numpy twin on every ISA path, its independence of the thread count, and the
layer's backward taking it where conv_algo.wgrad_direct_wins says so."""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from helpers import each_isa
from test_conv_algos import GEMM_DIRECT, close
from tianyuan import _C
from tianyuan.ops import conv as conv_ops
from tianyuan.ops.conv_ref import conv2d_ref, conv2d_weight_grad_ref

# weight gradient: besides GEMM_DIRECT's shapes, rows k past one packed block of 144 and
# tasks split mid-block (C*9 = 306), channels past one block of 32 (Co = 45), panels of
# several images in one chunk (3x3 maps), and an output gradient gathered in two image
# groups (3 images of 32 channels at 224x224: 6.4 MB each, budget 16 MB)
WEIGHT_GRAD = GEMM_DIRECT + [
    ((2, 34, 9, 10), 45, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((5, 8, 3, 3), 33, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((3, 2, 224, 224), 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    # the pointwise dot products (>= 56x56, <= 32 channels on one side): rows past the 4 x 6
    # tile's edge on both sides, one chunk an image; 5 chunks an image with a 9-lane tail
    ((2, 5, 56, 57), 7, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((3, 30, 61, 61), 45, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
]


@pytest.mark.parametrize("shape,co,kernel,stride,padding,dilation", WEIGHT_GRAD)
def test_gemm_weight_grad_matches_numpy_twin_on_every_isa(shape, co, kernel, stride, padding,
                                                          dilation):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    gy_shape = conv2d_ref(x[:, :1], np.zeros((1, 1) + kernel), None, stride, padding,
                          dilation).shape
    gy = rng.standard_normal((shape[0], co) + gy_shape[2:]).astype(np.float32)
    want = conv2d_weight_grad_ref(x.astype(np.float64), gy.astype(np.float64), kernel, stride,
                                  padding, dilation)
    for isa in each_isa():
        close(_C.conv2d_gemm_weight_grad(x, gy, kernel, stride, padding, dilation), want,
              f"weight gradient, {isa}")


@pytest.mark.parametrize("shape,co,kernel", [((4, 20, 16, 16), 40, (1, 1)),
                                             ((2, 34, 9, 10), 45, (3, 3)),
                                             ((3, 20, 61, 61), 40, (1, 1))])
def test_gemm_weight_grad_bits_do_not_depend_on_the_thread_count(shape, co, kernel):
    # few rows k (the 1x1 layer: 20) split the positions into fixed shares summed in order;
    # 306 rows split k between the threads; the pointwise dot products' fixed shares
    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape).astype(np.float32)
    gy = rng.standard_normal((shape[0], co) + shape[2:]).astype(np.float32)
    pad = (kernel[0] // 2,) * 4
    before = ty.get_num_threads()
    try:
        outs = []
        for threads in (1, 2, 3):
            ty.set_num_threads(threads)
            outs.append(_C.conv2d_gemm_weight_grad(x, gy, kernel, (1, 1), pad, (1, 1)))
    finally:
        ty.set_num_threads(before)
    for threads, out in zip((2, 3), outs[1:]):
        np.testing.assert_array_equal(out, outs[0], err_msg=f"{threads} threads")


def test_gemm_weight_grad_binding_rejects_bad_arguments():
    x = np.zeros((2, 4, 5, 5), np.float32)
    geo = ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
    with pytest.raises(ValueError, match=r"gy must be \(2, Co, 5, 5\).*got \(2, 3, 4, 5\)"):
        _C.conv2d_gemm_weight_grad(x, np.zeros((2, 3, 4, 5), np.float32), *geo)
    with pytest.raises(ValueError, match="float32"):
        _C.conv2d_gemm_weight_grad(x, np.zeros((2, 3, 5, 5)), *geo)


@pytest.mark.parametrize("transpose", [False, True])
def test_direct_weight_gradient_agrees_with_im2col(transpose, monkeypatch):
    # the layer's backward takes the direct weight gradient where wgrad_direct_wins says so
    # (any forward algorithm; ConvTranspose2d through the adjoint convolution's)
    rng = np.random.default_rng(6)
    x = ty.tensor(rng.standard_normal((2, 6, 9, 8)).astype(np.float32))
    w = ty.tensor(rng.standard_normal((6, 5, 3, 3) if transpose else (5, 6, 3, 3))
                  .astype(np.float32), requires_grad=True)
    conv = (lambda: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)) \
        if transpose else (lambda: F.conv2d(x, w, stride=(1, 2), padding=(1, 2)))
    grads = {}
    for direct in (False, True):
        monkeypatch.setattr(conv_ops.conv_algo, "wgrad_direct_wins",
                            lambda *args, direct=direct: direct)
        for isa in each_isa():
            w.grad = None
            y = conv()
            (y * ty.tensor(np.sin(np.arange(y.numpy().size, dtype=np.float32))
                           .reshape(y.shape))).sum().backward()
            grads[direct, isa] = w.grad.numpy()
    for isa in ty.available_isas():
        close(grads[True, isa], grads[False, isa], f"weight gradient, {isa}")
