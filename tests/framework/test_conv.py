import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from helpers import check_op, each_isa, gradcheck
from tianyuan import _C
from tianyuan.ops import conv as conv_ops
from tianyuan.ops.conv_ref import col2im_ref, conv2d_ref, conv_transpose2d_ref, im2col_ref

# (x shape, kernel, stride, padding (t, b, l, r), dilation)
GEOMETRIES = [
    ((2, 3, 5, 6), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 2, 7, 5), (3, 2), (2, 3), (0, 2, 1, 0), (2, 1)),
    ((3, 1, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 5, 4, 4), (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    ((2, 2, 6, 6), (2, 2), (3, 3), (2, 0, 0, 2), (2, 2)),
]


@pytest.mark.parametrize("shape,kernel,stride,padding,dilation", GEOMETRIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_im2col_col2im_match_numpy_twin(shape, kernel, stride, padding, dilation, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    want = im2col_ref(x, kernel, stride, padding, dilation)
    c = rng.standard_normal(want.shape).astype(dtype)
    want_back = col2im_ref(c, shape, kernel, stride, padding, dilation)
    for isa in each_isa():
        cols = _C.im2col(x, kernel, stride, padding, dilation)
        assert cols.dtype == dtype
        np.testing.assert_array_equal(cols, want, err_msg=isa)
        back = _C.col2im(c, shape, kernel, stride, padding, dilation)
        np.testing.assert_allclose(back, want_back, rtol=1e-6, atol=1e-6, err_msg=isa)
        # col2im is the adjoint of im2col: <im2col(x), c> == <x, col2im(c)>
        np.testing.assert_allclose((cols * c).sum(), (x * back).sum(), rtol=1e-5)


@pytest.mark.parametrize("shape", [(37, 21, 3, 5), (2, 40, 1, 1), (5, 3, 7, 7), (1, 1, 2, 1),
                                   (300, 301, 1, 1)])  # 1x1: tiles of 32, in parallel
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_flip_kernel_is_the_transposed_flipped_kernel(shape, dtype):
    w = np.random.default_rng(2).standard_normal(shape).astype(dtype)
    np.testing.assert_array_equal(_C.conv_flip_kernel(w), w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
    np.testing.assert_array_equal(_C.conv_flip_kernel(w[:, ::2]),  # a strided view is copied
                                  w[:, ::2].transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
    with pytest.raises(ValueError, match=r"conv_flip_kernel: w must be \(Co, C, kh, kw\)"):
        _C.conv_flip_kernel(w[0])


def test_native_bindings_reject_bad_arguments():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="im2col: x must be float32 or float64"):
        _C.im2col(x.astype(np.int32), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1))
    with pytest.raises(ValueError, match="im2col: x must be 4-D"):
        _C.im2col(x[0], (3, 3), (1, 1), (0, 0, 0, 0), (1, 1))
    with pytest.raises(ValueError, match=r"im2col: kernel \(3, 3\), stride \(0, 1\) .*>= 1"):
        _C.im2col(x, (3, 3), (0, 1), (0, 0, 0, 0), (1, 1))
    with pytest.raises(ValueError, match="larger than the padded input"):
        _C.im2col(x, (5, 5), (1, 1), (0, 0, 0, 0), (1, 1))
    with pytest.raises(ValueError, match=r"col2im: cols must have shape \(9, 4\)"):
        _C.col2im(np.zeros((9, 5), np.float32), (1, 1, 4, 4), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1))


def _pads(padding):
    if isinstance(padding, int):
        return (padding,) * 4
    return padding if len(padding) == 4 else (padding[0], padding[0], padding[1], padding[1])


# x shape, w shape, stride, padding, dilation, groups
CONV_CASES = [
    ((2, 3, 5, 5), (4, 3, 3, 3), 1, 1, 1, 1),
    ((1, 3, 6, 7), (2, 3, 3, 3), 2, 0, 1, 1),
    ((1, 2, 5, 6), (3, 2, 3, 2), (2, 1), (0, 2, 1, 0), 1, 1),  # asymmetric padding
    ((1, 2, 7, 7), (2, 2, 3, 3), 1, 2, 2, 1),                  # dilation
    ((2, 4, 4, 5), (6, 2, 3, 3), 1, 1, 1, 2),                  # groups
    ((2, 3, 5, 4), (6, 1, 3, 3), 2, 1, 1, 3),                  # depthwise, multiplier 2
    ((2, 5, 3, 4), (3, 5, 1, 1), 1, 0, 1, 1),                  # pointwise (GEMM only)
    ((1, 6, 3, 3), (4, 3, 1, 1), 1, 0, 1, 2),                  # grouped pointwise
    ((3, 5, 1, 1), (7, 5, 3, 3), 1, 1, 1, 1),                  # 1x1 images, odd channels
    ((1, 2, 4, 4), (3, 2, 1, 1), 2, 1, 1, 1),                  # strided padded 1x1
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV_CASES)
def test_conv2d_forward_and_gradients(xs, ws, stride, padding, dilation, groups):
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    ref_args = dict(stride=pair(stride), padding=_pads(padding), dilation=pair(dilation),
                    groups=groups)
    check_op(lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups),
             lambda x, w, b: conv2d_ref(x, w, b, **ref_args),
             [xs, ws, (ws[0],)], fwd_rtol=1e-5, fwd_atol=1e-5)


def test_conv2d_without_bias_and_frozen_weight():
    rng = np.random.default_rng(1)
    x = ty.tensor(rng.standard_normal((2, 3, 4, 4)), requires_grad=True)
    w = ty.tensor(rng.standard_normal((2, 3, 3, 3)))
    y = F.conv2d(x, w, padding=1)
    np.testing.assert_allclose(y.numpy(), conv2d_ref(x.numpy(), w.numpy(), None, padding=(1,) * 4),
                               rtol=1e-5, atol=1e-5)
    y.sum().backward()
    assert x.grad.shape == x.shape and w.grad is None


def test_conv2d_batch_chunks(monkeypatch):
    # a budget of one image's columns forces one chunk per image
    monkeypatch.setattr(conv_ops, "COLUMN_BUDGET", 3 * 9 * 16 * 8)
    check_op(lambda x, w: F.conv2d(x, w, padding=1),
             lambda x, w: conv2d_ref(x, w, padding=(1,) * 4),
             [(3, 3, 4, 4), (2, 3, 3, 3)], fwd_atol=1e-5)


def test_conv2d_same_and_valid_padding():
    x, w = ty.randn(1, 2, 5, 6), ty.randn(3, 2, 4, 3)
    assert F.conv2d(x, w, padding="same").shape == (1, 3, 5, 6)
    assert F.conv2d(x, w, padding="valid").shape == (1, 3, 2, 4)
    np.testing.assert_allclose(F.conv2d(x, w, padding="same").numpy(),
                               F.conv2d(x, w, padding=(1, 2, 1, 1)).numpy())


# x shape, w shape, stride, padding, output_padding, groups, dilation
TRANSPOSE_CASES = [
    ((2, 3, 3, 3), (3, 2, 3, 3), 1, 0, 0, 1, 1),
    ((1, 2, 3, 4), (2, 3, 3, 3), 2, 1, 1, 1, 1),          # stride 2, output_padding
    ((1, 4, 3, 3), (4, 2, 2, 3), (2, 3), (0, 1), (1, 2), 2, 1),  # groups, rectangular
    ((1, 2, 3, 3), (2, 2, 3, 3), 1, 1, 1, 1, 2),          # output_padding < dilation
    ((2, 3, 2, 2), (3, 1, 3, 3), 2, 1, 0, 3, 1),          # depthwise
]


@pytest.mark.parametrize("xs,ws,stride,padding,output_padding,groups,dilation", TRANSPOSE_CASES)
def test_conv_transpose2d_forward_and_gradients(xs, ws, stride, padding, output_padding, groups,
                                                dilation):
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    co = ws[1] * groups
    check_op(lambda x, w, b: F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups,
                                                dilation),
             lambda x, w, b: conv_transpose2d_ref(x, w, b, pair(stride), pair(padding),
                                                  pair(output_padding), pair(dilation), groups),
             [xs, ws, (co,)], fwd_rtol=1e-5, fwd_atol=1e-5)


def test_conv_transpose2d_is_the_input_gradient_of_conv2d():
    rng = np.random.default_rng(2)
    x = ty.tensor(rng.standard_normal((2, 4, 7, 8)), requires_grad=True)
    w = ty.tensor(rng.standard_normal((6, 2, 3, 3)))
    y = F.conv2d(x, w, stride=2, padding=1, groups=2)
    g = rng.standard_normal(y.shape)
    y.backward(g)
    # output_padding recovers the row/column the strided conv dropped: 7 -> 4 -> 7, 8 -> 4 -> 8
    t = F.conv_transpose2d(ty.tensor(g), w, stride=2, padding=1, output_padding=(0, 1), groups=2)
    np.testing.assert_allclose(t.numpy(), x.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_conv_error_messages():
    x = ty.randn(2, 4, 8, 8)
    with pytest.raises(ValueError) as err:
        F.conv2d(x, ty.randn(16, 3, 3, 3))
    assert str(err.value) == ("conv2d: input has 4 channels but weight expects 3 (groups=1), "
                              "input (2, 4, 8, 8), weight (16, 3, 3, 3)")
    with pytest.raises(ValueError, match="conv2d: input must be 4-D"):
        F.conv2d(ty.randn(4, 8, 8), ty.randn(16, 4, 3, 3))
    with pytest.raises(ValueError, match=r"conv2d: bias must have shape \(16,\)"):
        F.conv2d(x, ty.randn(16, 4, 3, 3), ty.randn(8))
    with pytest.raises(ValueError, match="not divisible by groups=2"):
        F.conv2d(x, ty.randn(5, 2, 3, 3), groups=2)
    with pytest.raises(ValueError, match="does not fit the padded input"):
        F.conv2d(x, ty.randn(1, 4, 9, 9))
    with pytest.raises(ValueError, match="conv2d: stride must be >= 1"):
        F.conv2d(x, ty.randn(1, 4, 3, 3), stride=0)
    with pytest.raises(TypeError, match="conv2d: input is float32 but weight is float64"):
        F.conv2d(x, ty.randn(1, 4, 3, 3, dtype="float64"))
    with pytest.raises(ValueError, match="conv_transpose2d: output_padding"):
        F.conv_transpose2d(x, ty.randn(4, 2, 3, 3), stride=2, output_padding=2)
    with pytest.raises(ValueError, match="conv_transpose2d: input has 4 channels but weight "):
        F.conv_transpose2d(x, ty.randn(3, 2, 3, 3))


def test_conv2d_float64_gradcheck_native_path():
    # the gradient check above runs in float64 through the native kernels' float64 instance;
    # here once more with an all-ones upstream weight to cover sum() reductions
    rng = np.random.default_rng(3)
    gradcheck(lambda x, w: F.conv2d(x, w, stride=(1, 2), padding=(1, 0, 0, 1)),
              [rng.standard_normal((1, 2, 4, 5)), rng.standard_normal((2, 2, 2, 2))])
