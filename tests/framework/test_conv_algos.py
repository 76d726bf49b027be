"""Convolution algorithms (framework/ops/conv_algo.py) against the numpy twins, on every ISA
path this machine has: the direct GEMM, Winograd, forced algorithms, the per-shape cache (the
depthwise kernels: test_depthwise_kernels.py; the direct weight gradient:
test_conv_wgrad.py)."""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from helpers import check_op, close, each_isa
from tianyuan import _C
from tianyuan.ops import conv as conv_ops
from tianyuan.ops import winograd
from tianyuan.ops.conv_ref import (conv2d_ref, conv_epilogue_ref, winograd_input_ref,
                                   winograd_output_ref, winograd_weight_transform)

# (x shape, Co, kernel, stride, padding (t, b, l, r), dilation): panels of 32 positions that
# straddle rows and images (up to 8 images a panel, with reductions in two chunks: 270 rows),
# tails, Co not a multiple of 12, pointwise (read in place), 1x1 images, stride 2 and 3,
# dilation, asymmetric padding
GEMM_DIRECT = [
    ((2, 5, 9, 11), 7, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 37, 40), 13, (3, 3), (2, 2), (0, 2, 1, 0), (1, 2)),
    ((2, 20, 7, 7), 25, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((1, 30, 5, 6), 30, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((3, 1, 1, 1), 3, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 23, 29), 24, (7, 7), (3, 2), (3, 3, 3, 3), (1, 1)),
    ((2, 16, 9, 8), 12, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    ((5, 16, 3, 4), 14, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((17, 2, 2, 2), 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 6, 13, 11), 10, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
]


def _gemm_case(seed, shape, co, kernel):
    """x, w, scale, shift (float32) of a gemm_direct case."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((co, shape[1]) + kernel).astype(np.float32)
    return (x, w) + tuple(rng.standard_normal((2, co)).astype(np.float32))


@pytest.mark.parametrize("shape,co,kernel,stride,padding,dilation", GEMM_DIRECT)
def test_gemm_direct_matches_numpy_twin_on_every_isa(shape, co, kernel, stride, padding,
                                                      dilation):
    x, w, scale, shift = _gemm_case(3, shape, co, kernel)
    y = conv2d_ref(x, w, None, stride, padding, dilation)
    for isa in each_isa():
        close(_C.conv2d_gemm(x, w, None, None, stride, padding, dilation), y, f"plain, {isa}")
        for act in (0, 1, 2):
            close(_C.conv2d_gemm(x, w, scale, shift, stride, padding, dilation, act),
                  conv_epilogue_ref(y, scale, shift, act), f"act {act}, {isa}")


# plans of the direct GEMM (conv_gemm.h): 49 positions in panels of 28 and blocks of 7 with a
# channel tail (70), 7-position blocks that straddle images (30 positions each), pointwise read
# in place, reduction rows in several chunks (3x3 from 130 channels: 1170), stride 2 with
# asymmetric padding, dilation, more panels than one stream work item holds (24x24)
GEMM_PLANS = [
    ((1, 64, 7, 7), 70, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((3, 8, 5, 6), 200, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 40, 7, 7), 33, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((1, 130, 5, 5), 20, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 24, 13, 11), 130, (3, 3), (2, 2), (0, 2, 1, 0), (1, 1)),
    ((2, 12, 9, 9), 64, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    ((1, 6, 24, 24), 17, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
]


@pytest.mark.parametrize("shape,co,kernel,stride,padding,dilation", GEMM_PLANS)
def test_gemm_direct_plans_give_the_same_bits_on_every_isa(shape, co, kernel, stride, padding,
                                                           dilation):
    # each output is summed in the order of k with the same multiply-adds in every plan, so
    # the plan (chosen by shape and thread count) never changes a result
    x, w, scale, shift = _gemm_case(5, shape, co, kernel)
    want = conv_epilogue_ref(conv2d_ref(x, w, None, stride, padding, dilation), scale, shift, 1)
    for isa in each_isa():
        outs = {plan: _C.conv2d_gemm(x, w, scale, shift, stride, padding, dilation, 1, plan)
                for plan in ("auto", "slab", "stream", "few")}
        close(outs["slab"], want, f"slab, {isa}")
        for plan, out in outs.items():
            np.testing.assert_array_equal(out, outs["slab"], err_msg=f"{plan}, {isa}")


def test_gemm_direct_binding_rejects_bad_arguments():
    x, w = np.zeros((1, 4, 5, 5), np.float32), np.zeros((2, 4, 3, 3), np.float32)
    geo = ((1, 1), (1, 1, 1, 1), (1, 1))
    with pytest.raises(ValueError, match="same C"):
        _C.conv2d_gemm(x, np.zeros((2, 3, 3, 3), np.float32), None, None, *geo)
    with pytest.raises(ValueError, match=r"scale must be \(2,\)"):
        _C.conv2d_gemm(x, w, np.ones(3, np.float32), None, *geo)
    with pytest.raises(ValueError, match="float32"):
        _C.conv2d_gemm(x.astype(np.float64), w, None, None, *geo)
    with pytest.raises(ValueError, match="act must be"):
        _C.conv2d_gemm(x, w, None, None, *geo, 3)
    with pytest.raises(ValueError, match="plan must be 'auto', 'slab', 'stream' or 'few', got"):
        _C.conv2d_gemm(x, w, None, None, *geo, 0, "fast")


@pytest.mark.parametrize("xs,ws,padding,dilation", [
    ((2, 5, 9, 11), (7, 5, 3, 3), 1, 1), ((1, 4, 10, 9), (6, 4, 3, 3), (2, 1), 2),
    ((2, 3, 8, 8), (5, 3, 5, 5), 2, 1), ((1, 2, 6, 7), (3, 2, 3, 3), 0, 1)])
def test_gemm_direct_input_gradient_is_the_adjoint_convolution(xs, ws, padding, dilation,
                                                              monkeypatch):
    # stride 1: the input gradient runs as a convolution of the output gradient with the
    # flipped, transposed kernel (conv._direct_input_grad); compared with im2col's col2im
    monkeypatch.setattr(conv_ops.conv_algo, "gemm_direct_wins", lambda *args, **kw: True)
    rng = np.random.default_rng(4)
    x = ty.tensor(rng.standard_normal(xs).astype(np.float32), requires_grad=True)
    w = ty.tensor(rng.standard_normal(ws).astype(np.float32))
    for isa in each_isa():
        grads = {}
        for algo in ("im2col_gemm", "gemm_direct"):
            x.grad = None
            with conv_ops.force_algorithm(algo):
                y = F.conv2d(x, w, padding=padding, dilation=dilation)
                (y * ty.tensor(np.arange(y.numpy().size, dtype=np.float32).reshape(y.shape)
                               / y.numpy().size)).sum().backward()
            grads[algo] = x.grad.numpy()
        close(grads["gemm_direct"], grads["im2col_gemm"], f"input gradient, {isa}")


@pytest.mark.parametrize("xs,ws,stride,padding,dilation", [
    ((3, 5, 9, 11), (7, 5, 3, 3), 2, 1, 1), ((2, 4, 10, 9), (6, 4, 3, 3), (2, 3), (2, 1), 2),
    ((2, 3, 12, 12), (5, 3, 1, 1), 2, 0, 1), ((1, 2, 15, 14), (3, 2, 5, 5), 3, (0, 2), 1)])
def test_columns_on_the_direct_kernel_give_the_input_gradient(xs, ws, stride, padding,
                                                              dilation, monkeypatch):
    # strided layers: W^T gy as a 1x1 convolution of gy, then col2im per image
    # (conv._columns_input_grad), against numpy's GEMM; a column budget of one image a chunk
    rng = np.random.default_rng(8)
    x = ty.tensor(rng.standard_normal(xs).astype(np.float32), requires_grad=True)
    w = ty.tensor(rng.standard_normal(ws).astype(np.float32))
    monkeypatch.setattr(conv_ops, "COLUMN_BUDGET", 1)
    calls = []
    real = conv_ops._columns_input_grad
    monkeypatch.setattr(conv_ops, "_columns_input_grad",
                        lambda *args: calls.append(1) or real(*args))
    for isa in each_isa():
        grads = {}
        for direct in (False, True):
            monkeypatch.setattr(conv_ops.conv_algo, "columns_on_direct_wins",
                                lambda *args, direct=direct: direct)
            x.grad = None
            with conv_ops.force_algorithm("im2col_gemm"):
                y = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
                (y * ty.tensor(np.cos(np.arange(y.numpy().size, dtype=np.float32))
                               .reshape(y.shape))).sum().backward()
            grads[direct] = x.grad.numpy()
        close(grads[True], grads[False], f"input gradient, {isa}")
    assert len(calls) == len(ty.available_isas())


# (x shape, Co, padding (t, b, l, r)): odd sizes, 1x1 images, asymmetric padding
# (1, 1, 3, 2051): a row of more than kWinoStage tiles takes the unstaged path;
# (1, 3, 37, 70): 19 x 35 tiles, several staged chunks per plane, odd lane tails
WINOGRAD = [((2, 3, 5, 7), 4, (1, 1, 1, 1)), ((1, 17, 1, 1), 5, (1, 1, 1, 1)),
            ((1, 2, 8, 9), 3, (0, 2, 2, 0)), ((3, 5, 4, 3), 18, (2, 1, 0, 1)),
            ((1, 1, 3, 2051), 2, (1, 1, 1, 1)), ((1, 3, 37, 70), 21, (1, 0, 2, 1))]


@pytest.mark.parametrize("shape,co,padding", WINOGRAD)
def test_winograd_matches_direct_convolution_on_every_isa(shape, co, padding):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((co, shape[1], 3, 3)).astype(np.float32)
    want = conv2d_ref(x, w, None, (1, 1), padding)
    out_size = want.shape[2:]
    v = winograd_input_ref(x, (padding[0], padding[2]), out_size)
    gy = rng.standard_normal(want.shape).astype(np.float32)
    want_gx = conv2d_ref(gy, np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]),
                         None, (1, 1), tuple(2 - p for p in padding))
    m = rng.standard_normal((16, co, v.shape[2])).astype(np.float32)
    for isa in each_isa():
        close(_C.winograd_weight_transform(w), winograd_weight_transform(w), isa)
        close(_C.winograd_input_transform(x, (padding[0], padding[2]), out_size), v, isa)
        close(_C.winograd_output_transform(m, shape[0], out_size),
              winograd_output_ref(m, shape[0], out_size), isa)
        close(winograd.conv2d(x, w, padding), want, f"winograd forward, {isa}")
        close(winograd.conv2d_input_grad(gy, w, padding), want_gx, f"winograd gx, {isa}")


@pytest.mark.parametrize("algo", ["im2col_gemm", "depthwise_direct", "gemm_1x1",
                                  "winograd_f2x2", "gemm_direct"])
def test_forced_algorithms_agree(algo):
    rng = np.random.default_rng(2)
    cases = [((2, 6, 7, 9), (6, 1, 3, 3), 6, 1), ((1, 8, 5, 5), (4, 8, 1, 1), 1, 0),
             ((1, 4, 6, 6), (8, 2, 3, 3), 2, 1), ((2, 3, 5, 7), (4, 3, 3, 3), 1, 1)]
    for xs, ws, groups, pad in cases:
        x = ty.tensor(rng.standard_normal(xs).astype(np.float32), requires_grad=True)
        w = ty.tensor(rng.standard_normal(ws).astype(np.float32), requires_grad=True)
        want = conv2d_ref(x.numpy(), w.numpy(), None, (1, 1), (pad,) * 4, (1, 1), groups)
        with conv_ops.force_algorithm(algo):
            y = F.conv2d(x, w, padding=pad, groups=groups)
            y.sum().backward()
        close(y.numpy(), want, f"{algo} on {xs} x {ws}")
        gx, gw = x.grad.numpy(), w.grad.numpy()
        x.grad = w.grad = None
        F.conv2d(x, w, padding=pad, groups=groups).sum().backward()  # automatic choice
        close(gx, x.grad.numpy(), f"{algo} input gradient")
        close(gw, w.grad.numpy(), f"{algo} weight gradient")


def test_winograd_conv2d_gradients_float64():
    with conv_ops.force_algorithm("winograd_f2x2"):
        check_op(lambda x, w, b: F.conv2d(x, w, b, padding=(1, 2)),
                 lambda x, w, b: conv2d_ref(x, w, b, (1, 1), (1, 1, 2, 2)),
                 [(2, 2, 4, 5), (3, 2, 3, 3), (3,)])


def test_fast_run_times_candidates_once_per_shape(monkeypatch):
    timed = []
    monkeypatch.setattr(conv_ops.conv_algo, "_fastest",
                        lambda names, run: timed.append(names) or names[-1])
    conv_ops.conv_algo.set_fastrun(True)
    try:
        x, w = ty.randn(1, 8, 12, 12), ty.randn(8, 8, 3, 3)
        F.conv2d(x, w, padding=1)
        F.conv2d(x, w, padding=1)
        (choice,) = conv_ops.algorithm_choices().values()
    finally:
        conv_ops.conv_algo.set_fastrun(False)
    assert len(timed) == 1 and set(timed[0]) == {"winograd_f2x2", "gemm_direct",
                                                "im2col_gemm"}
    assert choice == timed[0][-1]


def test_default_choice_is_a_fixed_rule():
    conv_ops.conv_algo.clear_choices()
    F.conv2d(ty.randn(1, 8, 12, 12), ty.randn(8, 8, 3, 3), padding=1)  # 72 rows: stem-like
    # 144 tiles: winograd, unless gemm_direct runs (1.5-2x faster at 24x24, batch 1)
    F.conv2d(ty.randn(1, 32, 24, 24), ty.randn(32, 32, 3, 3), padding=1)
    F.conv2d(ty.randn(1, 32, 7, 7), ty.randn(32, 32, 3, 3), padding=1)  # 16 tiles
    F.conv2d(ty.randn(8, 32, 7, 7), ty.randn(32, 32, 3, 3), padding=1)  # 128 tiles, 7x7
    F.conv2d(ty.randn(1, 3, 16, 16), ty.randn(8, 3, 7, 7), stride=2, padding=3)  # 7x7 stem
    F.conv2d(ty.randn(1, 32, 28, 28), ty.randn(32, 32, 3, 3), padding=1)  # 784 positions
    # our GEMM without a column matrix is taken where its AVX2 or AVX-512 kernel runs
    direct = "gemm_direct" if ty.current_isa() != "generic" else None
    assert list(conv_ops.algorithm_choices().values()) == [
        direct or "im2col_gemm", direct or "winograd_f2x2", direct or "im2col_gemm",
        direct or "im2col_gemm", direct or "im2col_gemm", direct or "winograd_f2x2"]


def test_rule_between_winograd_and_gemm_direct():
    def chosen(x_shape, co):
        x, w = np.zeros(x_shape, np.float32), np.zeros((co, x_shape[1], 3, 3), np.float32)
        geo = conv_ops._Geometry((3, 3), (1, 1), (1,) * 4, (1, 1))
        return conv_ops.conv_algo.rule(x, w, 1, geo, conv_ops.conv_algo.applicable(x, w, 1, geo))

    if ty.current_isa() == "generic":
        pytest.skip("gemm_direct is taken with its AVX2 and AVX-512 kernels only")
    assert chosen((16, 512, 7, 7), 512) == "gemm_direct"  # deep layers: panels span images
    assert chosen((16, 256, 14, 14), 256) == "gemm_direct"
    assert chosen((16, 128, 28, 28), 128) == "gemm_direct"
    assert chosen((2, 256, 28, 28), 256) == "winograd_f2x2"  # wide channels on big maps
    assert chosen((1, 512, 7, 7), 512) == "gemm_direct"  # 49 positions: w read once


def test_choice_is_cached_per_shape_and_listed(monkeypatch):
    conv_ops.conv_algo.clear_choices()
    x = ty.randn(1, 4, 6, 6)
    F.conv2d(x, ty.randn(4, 1, 3, 3), padding=1, groups=4)
    F.conv2d(x, ty.randn(8, 4, 1, 1))
    chosen = sorted(conv_ops.algorithm_choices().values())
    assert chosen == ["depthwise_direct", "gemm_1x1"]
    monkeypatch.setenv("TIANYUAN_CONV_ALGO", "im2col_gemm")
    assert conv_ops.conv_algo.choose(x.numpy(), np.zeros((4, 1, 3, 3), np.float32), 4,
                                     conv_ops._Geometry((3, 3), (1, 1), (1,) * 4, (1, 1))) \
        == "im2col_gemm"
    monkeypatch.setenv("TIANYUAN_CONV_ALGO", "nonsense")
    with pytest.raises(ValueError, match="unknown algorithm 'nonsense'"):
        F.conv2d(x, ty.randn(4, 1, 3, 3), padding=1, groups=4)


def test_pointwise_rule_by_batch_and_map_size():
    conv_ops.conv_algo.clear_choices()
    w = ty.randn(16, 32, 1, 1)
    F.conv2d(ty.randn(1, 32, 14, 14), w)   # batch 1, small weights: x read in place
    F.conv2d(ty.randn(1, 8, 14, 14), ty.randn(16, 8, 1, 1))  # batch 1, 8 deep: numpy's GEMM
    F.conv2d(ty.randn(1, 1024, 7, 7), ty.randn(512, 1024, 1, 1))  # 2^19 weights, small map
    F.conv2d(ty.randn(1, 256, 28, 28), ty.randn(2048, 256, 1, 1))  # 2^19 weights: numpy's
    F.conv2d(ty.randn(2, 32, 14, 14), w)   # a batch of 14x14 maps: x read in place
    F.conv2d(ty.randn(2, 32, 7, 7), w)     # a batch of 7x7 maps: panels over the batch
    F.conv2d(ty.randn(2, 16, 7, 7), ty.randn(16, 16, 1, 1))  # 16 deep: panels too
    F.conv2d(ty.randn(2, 8, 7, 7), ty.randn(16, 8, 1, 1))  # 8 deep: one GEMM, batch folded
    simd = ty.current_isa() != "generic"  # the direct GEMM's AVX2 or AVX-512 kernel
    direct = "gemm_direct" if simd else "gemm_1x1"
    assert list(conv_ops.algorithm_choices().values()) == [
        direct, "gemm_1x1", direct, "gemm_1x1", direct,
        "gemm_direct" if simd else "im2col_gemm", "gemm_direct" if simd else "im2col_gemm",
        "im2col_gemm"]
