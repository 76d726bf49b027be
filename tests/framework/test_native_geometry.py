"""Native kernels refuse a geometry that does not fit their input (issue 58, hostile files).

Every binding checks kernel, stride, padding, dilation, groups and caller-given shapes in C++
(framework/csrc/bind_geometry.h) before it forms a pointer, so no Python path can skip them:
each family is called through its binding (and its Python wrapper) with a kernel larger than
the input, zero and negative sizes, stride 0, too much padding, groups that do not divide the
channels and sizes that overflow, on every ISA path, and must raise ValueError at once. A
valid geometry at the edge (kernel == input, padding == half the kernel, a padded kernel
larger than the image) still matches the numpy twin.
"""
import time

import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import _C, jit, nn
from tianyuan import quantization as Q
from tianyuan.io.serialization import SerializationError
from tianyuan.ops import conv_ref, pool_ref
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R

from helpers import check_quant, each_isa, guarded_copy

HUGE = 10 ** 9
BIG = 2 ** 62   # a padding or dilation whose sums and products overflow int64
RNG = np.random.default_rng(58)
XU8 = RNG.integers(0, 256, (2, 8, 8, 8), dtype=np.uint8)    # (N, C, H, W)
XF = RNG.standard_normal((2, 8, 8, 8)).astype(np.float32)
Z4 = (0, 0, 0, 0)

# (kernel, stride, padding (top, bottom, left, right), dilation), each wrong for an 8 x 8 image
BAD = {
    "kernel > input": ((9, 9), (9, 9), Z4, (1, 1)),
    "kernel 0": ((0, 3), (1, 1), Z4, (1, 1)),
    "kernel < 0": ((3, -3), (1, 1), Z4, (1, 1)),
    "stride 0": ((3, 3), (0, 1), Z4, (1, 1)),
    "stride < 0": ((3, 3), (1, -2), Z4, (1, 1)),
    "padding < 0": ((3, 3), (1, 1), (0, -1, 0, 0), (1, 1)),
    "dilation 0": ((3, 3), (1, 1), Z4, (1, 0)),
    "kernel 10**9": ((HUGE, HUGE), (1, 1), Z4, (1, 1)),
    "kernel 10**9, padded to fit": ((HUGE, 3), (1, 1), (HUGE // 2, HUGE // 2, 1, 1), (1, 1)),
    "padding overflows": ((3, 3), (1, 1), (BIG, BIG, 0, 0), (1, 1)),
    "dilation overflows": ((3, 3), (1, 1), Z4, (BIG, 1)),
}
# pools only: PyTorch's padding of at most half the kernel
BAD_POOL = dict(BAD, **{"padding > half kernel": ((3, 3), (1, 1), (2, 2, 0, 0), (1, 1)),
                        "padding > kernel": ((2, 2), (2, 2), Z4[:2] + (3, 3), (1, 1))})


def refuses(call, match=None):
    """call() raises ValueError within half a second on every ISA path."""
    for isa in each_isa():
        start = time.perf_counter()
        with pytest.raises(ValueError, match=match):
            call()
        assert time.perf_counter() - start < 0.5, f"{isa}: took {time.perf_counter() - start}s"


def no_dilation(cases):
    return {k: v for k, v in cases.items() if v[3] == (1, 1)}


def small_kernel(cases):
    """The cases whose kernel an array of weights can have (0 <= k <= 16)."""
    return {k: v for k, v in cases.items() if all(0 <= n <= 16 for n in v[0])}


# ------------------------------------------------------------------ int8 pools

INT8_POOLS = {
    "int8_max_pool2d": lambda k, s, p: _C.int8_max_pool2d(XU8, k, s, p),
    "int8_max_pool2d_nhwc": lambda k, s, p: _C.int8_max_pool2d_nhwc(
        np.ascontiguousarray(XU8.transpose(0, 2, 3, 1)), k, s, p),
    "int8_avg_pool2d": lambda k, s, p: _C.int8_avg_pool2d(XU8, 3, k, s, p, True),
    "kernels.max_pool2d": lambda k, s, p: K.max_pool2d(XU8, k, s, p),
    "kernels.avg_pool2d": lambda k, s, p: K.avg_pool2d(XU8, 3, k, s, p, False),
    "kernels.max_pool2d channels-last": lambda k, s, p: K.max_pool2d(
        K.to_channels_last(XU8), k, s, p),
}


@pytest.mark.parametrize("case", no_dilation(BAD_POOL))
@pytest.mark.parametrize("pool", INT8_POOLS)
def test_int8_pools_refuse(pool, case):
    k, s, p, _ = BAD_POOL[case]
    refuses(lambda: INT8_POOLS[pool](k, s, p))


def test_int8_avg_pool_kernel_past_a_guarded_input():
    """The issue's case: kernel 9 on 8 x 8 had read past the array (SIGSEGV against a
    protected page); kernel 8 is the whole image."""
    x, keep = guarded_copy(XU8)
    refuses(lambda: K.avg_pool2d(x, 0, 9, None, 0), "kernel height 9 is larger than the padded")
    refuses(lambda: K.max_pool2d(x, 9), "kernel height 9")
    check_quant(K.avg_pool2d, R.avg_pool2d, x, 0, 8, None, 0)
    del keep


def test_int8_max_pool_kernel_of_a_billion_is_refused_at_once():
    refuses(lambda: K.max_pool2d(XU8, HUGE), "kernel height 1000000000")
    refuses(lambda: _C.int8_max_pool2d(XU8, (HUGE, HUGE), (1, 1), (HUGE // 2,) * 4),
            "more than 2\\^31 - 1")


@pytest.mark.parametrize("k,s,p", [(8, 8, 0), (3, 2, 1), (9, 1, 4), (2, 1, 1), ((3, 9), 2, (1, 4))])
def test_int8_pools_at_the_edge_match_the_reference(k, s, p):
    """kernel == input, padding == half the kernel, a kernel larger than the image that its
    padding makes fit (the clipped loops on every ISA)."""
    for x in (XU8, XU8.view(np.int8)):
        check_quant(K.max_pool2d, R.max_pool2d, x, k, s, p, what=f"max {k} {s} {p}")
        for include in (True, False):
            check_quant(K.avg_pool2d, R.avg_pool2d, x, 5, k, s, p, include,
                        what=f"avg {k} {s} {p} {include}")


def test_int8_pools_of_a_padded_huge_kernel_cost_the_image_not_the_kernel():
    """kernel 2^14 with padding 2^13 fits an 8 x 8 image (a 16392^2 padded plane): every
    window holds the whole image; the loops visit only its pixels."""
    k, p = 1 << 14, 1 << 13
    for isa in each_isa():
        start = time.perf_counter()
        got = K.max_pool2d(XU8, k, 1, p)
        assert time.perf_counter() - start < 0.5, isa
        assert got.shape == (2, 8, 9, 9)
        np.testing.assert_array_equal(got, np.broadcast_to(XU8.max((2, 3))[..., None, None],
                                                           got.shape), err_msg=isa)
        mean = K.avg_pool2d(XU8, 0, k, 1, p, False)
        want = (2 * XU8.astype(np.int64).sum((2, 3)) + 64) // 128
        np.testing.assert_array_equal(mean[:, :, 4, 4], want, err_msg=isa)


def test_int8_global_pool_refuses_sums_past_int32():
    x = np.broadcast_to(np.zeros((1, 1, 1, 1), np.uint8), (1, 2049, 4097, 1))
    refuses(lambda: _C.int8_avg_pool_global_nhwc(np.ascontiguousarray(x), 0), "2\\^23")


# ------------------------------------------------------------------ float pools

FLOAT_POOLS = {
    "max_pool2d": lambda k, s, p, d, o: _C.max_pool2d(XF, k, s, p, d, o),
    "max_pool2d_values": lambda k, s, p, d, o: _C.max_pool2d_values(XF, k, s, p, d, o),
    "avg_pool2d": lambda k, s, p, d, o: _C.avg_pool2d(XF, k, s, p, o, True),
    "avg_pool2d_backward": lambda k, s, p, d, o: _C.avg_pool2d_backward(
        np.zeros((2, 8) + o, np.float32), XF.shape, k, s, p, False),
    "F.max_pool2d": lambda k, s, p, d, o: F.max_pool2d(ty.tensor(XF), k, s, p, d),
    "F.avg_pool2d": lambda k, s, p, d, o: F.avg_pool2d(ty.tensor(XF), k, s, p),
}


@pytest.mark.parametrize("pool,case", [
    (pool, case) for pool in FLOAT_POOLS for case, (_, _, p, d) in BAD_POOL.items()
    if p[0] == p[1] and p[2] == p[3] and ("avg" not in pool or d == (1, 1))])
def test_float_pools_refuse(pool, case):
    """The float pools take (top, left) padding; average pooling has no dilation."""
    k, s, p, d = BAD_POOL[case]
    refuses(lambda: FLOAT_POOLS[pool](k, s, (p[0], p[2]), d, (1, 1)))


@pytest.mark.parametrize("out", [(2, 2), (0, 3), (4, 9), (HUGE, HUGE)])
def test_float_pools_refuse_an_out_size_the_geometry_does_not_give(out):
    """out_size comes from Python (ceil_mode); the binding takes only floor's or ceil's."""
    for pool in ("max_pool2d", "max_pool2d_values", "avg_pool2d") + \
            (("avg_pool2d_backward",) if HUGE not in out else ()):   # its grad: (2, 8) + out
        refuses(lambda: FLOAT_POOLS[pool]((3, 3), (2, 2), (1, 1), (1, 1), out), "out_size")


def test_float_pool_backward_refuses_bad_shapes_and_indices():
    g, arg = np.ones((1, 1, 2, 2), np.float32), np.zeros((1, 1, 2, 2), np.int32)
    for shape in [(1, 1, -4, 4), (1, 1, 2 ** 40, 2 ** 40), (2 ** 62, 2 ** 62, 1, 1)]:
        refuses(lambda: _C.max_pool2d_backward(g, arg, shape))
        refuses(lambda: _C.adaptive_avg_pool2d_backward(g, shape))
        refuses(lambda: _C.avg_pool2d_backward(g, shape, (2, 2), (2, 2), (0, 0), True))
    refuses(lambda: _C.max_pool2d_backward(g, arg + 16, (1, 1, 4, 4)), "argmax entries lie "
                                                                        "outside")
    refuses(lambda: _C.adaptive_avg_pool2d(XF, (HUGE, HUGE)), "out_size")


@pytest.mark.parametrize("k,s,p,d", [(8, 8, 0, 1), (3, 2, 1, 1), (9, 1, 4, 1), (3, 1, 2, 2)])
def test_float_pools_at_the_edge_match_the_reference(k, s, p, d):
    x = ty.tensor(XF)
    for isa in each_isa():
        out = F.max_pool2d(x, k, s, p, d)
        want = pool_ref.max_pool2d_ref(XF, (k, k), (s, s), (p, p), (d, d), out.shape[2:])[0]
        np.testing.assert_array_equal(out.numpy(), want, err_msg=isa)
        if d == 1:
            out = F.avg_pool2d(x, k, s, p)
            want = pool_ref.avg_pool2d_ref(XF, (k, k), (s, s), (p, p), out.shape[2:], True)
            np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=isa)


# ------------------------------------------------------------------ float convolutions

def _depthwise(k, s, p, d):
    return _C.depthwise_conv2d(XF, np.zeros((8, 1) + k, np.float32), None, s, p, d)


def _gemm(k, s, p, d):
    return _C.conv2d_gemm(XF, np.zeros((4, 8) + k, np.float32), None, None, s, p, d)


FLOAT_CONVS = {   # the kernel given as an argument: any size
    "im2col": lambda k, s, p, d: _C.im2col(XF, k, s, p, d),
    "col2im": lambda k, s, p, d: _C.col2im(np.zeros((1, 1), np.float32), XF.shape, k, s, p, d),
    "depthwise_conv2d_backward_weight": lambda k, s, p, d: _C.depthwise_conv2d_backward_weight(
        XF, np.zeros((2, 8, 1, 1), np.float32), k, s, p, d),
    "conv2d_gemm_weight_grad": lambda k, s, p, d: _C.conv2d_gemm_weight_grad(
        XF, np.zeros((2, 4, 1, 1), np.float32), k, s, p, d),
}
FLOAT_WEIGHTED = {   # the kernel is the weights' shape
    "depthwise_conv2d": _depthwise,
    "conv2d_gemm": _gemm,
    "F.conv2d": lambda k, s, p, d: F.conv2d(ty.tensor(XF), ty.zeros(4, 8, *k), None, s, p, d),
}


@pytest.mark.parametrize("conv,case", [(conv, case) for conv in FLOAT_CONVS for case in BAD] +
                         [(conv, case) for conv in FLOAT_WEIGHTED for case in small_kernel(BAD)])
def test_float_convs_refuse(conv, case):
    k, s, p, d = BAD[case]
    refuses(lambda: {**FLOAT_CONVS, **FLOAT_WEIGHTED}[conv](k, s, p, d))


def test_float_convs_refuse_bad_input_shapes():
    cols = np.zeros((1, 1), np.float32)
    w = np.zeros((8, 1, 3, 3), np.float32)
    for shape in [(1, 8, -4, 4), (-1, 8, 4, 4), (2 ** 40, 2 ** 40, 8, 8), (1, 1, 0, 8)]:
        refuses(lambda: _C.col2im(cols, shape, (3, 3), (1, 1), Z4, (1, 1)))
        refuses(lambda: _C.depthwise_conv2d_backward_input(
            np.zeros((1, 8, 1, 1), np.float32), w, shape, (1, 1), Z4, (1, 1)))
    # a column matrix of C x kh x kw rows past int64
    refuses(lambda: _C.col2im(cols, (1, 2 ** 40, 1, 1), (2 ** 12, 2 ** 12), (1, 1),
                              (2 ** 11, 2 ** 11, 2 ** 11, 2 ** 11), (1, 1)))


@pytest.mark.parametrize("k,p", [(8, 0), (3, 1), (3, 4)])   # the last: padding > kernel is valid
def test_float_convs_at_the_edge_match_the_reference(k, p):
    w = RNG.standard_normal((4, 8, k, k)).astype(np.float32)
    wd = RNG.standard_normal((8, 1, k, k)).astype(np.float32)
    pads = (p, p, p, p)
    for isa in each_isa():
        np.testing.assert_allclose(F.conv2d(ty.tensor(XF), ty.tensor(w), None, 1, p).numpy(),
                                   conv_ref.conv2d_ref(XF, w, padding=pads), rtol=1e-4,
                                   atol=1e-4, err_msg=isa)
        np.testing.assert_allclose(_C.depthwise_conv2d(XF, wd, None, (1, 1), pads, (1, 1)),
                                   conv_ref.depthwise_conv2d_ref(XF, wd, padding=pads),
                                   rtol=1e-4, atol=1e-4, err_msg=isa)


def test_winograd_refuses():
    m = np.zeros((16, 4, 16), np.float32)
    for pad, out in [((3, 0), (8, 8)), ((-1, 0), (8, 8)), ((1, 1), (0, 8)),
                     ((1, 1), (HUGE, 8)), ((1, 1), (13, 8)), ((0, 0), (2, 8))]:
        refuses(lambda: _C.winograd_input_transform(XF, pad, out))
    for batch, out in [(-1, (8, 8)), (1, (0, 8)), (2 ** 62, (HUGE, HUGE)), (2 ** 40, (8, 8))]:
        refuses(lambda: _C.winograd_output_transform(m, batch, out))


# ------------------------------------------------------------------ int8 convolutions

def _int8_conv(w, groups, s, p, d, wshape=None, bind_groups=None):
    """The binding itself (_C.Int8Conv), so that no Python check runs first: w packed in
    `groups`, the binding told wshape and bind_groups (by default the packed ones)."""
    packed = K.pack_weights(w, groups)
    oc = w.shape[0]
    tail = (np.zeros(oc, np.int32), np.full(oc, 1 << 30, np.int32), np.full(oc, 31, np.int32),
            0, False, False, 255, s, p, d)
    if packed.depthwise:
        return _C.Int8Conv(True, packed.raw, None, packed.raw.shape, *tail, 1)
    return _C.Int8Conv(False, packed.packed, packed.row_sums, wshape or packed.shape, *tail,
                       groups if bind_groups is None else bind_groups)


INT8_CONVS = {
    "int8_conv2d": lambda k, s, p, d: _int8_conv(np.ones((4, 8) + k, np.int8), 1, s, p, d)(XU8,
                                                                                          3),
    "int8_conv2d channels-last": lambda k, s, p, d: K.PreparedConv(
        K.pack_weights(np.ones((4, 8) + k, np.int8)), 0, 1 << 30, 31, 0, False, np.uint8, s, p,
        d)(K.to_channels_last(XU8), 3),
    "int8_conv2d groups 2": lambda k, s, p, d: _int8_conv(np.ones((4, 4) + k, np.int8), 2, s,
                                                          p, d)(XU8, 3),
    "int8_depthwise_conv2d": lambda k, s, p, d: _int8_conv(np.ones((8, 1) + k, np.int8), 8, s,
                                                           p, d)(XU8, 3),
    "kernels.conv2d": lambda k, s, p, d: K.conv2d(XU8, 3, K.pack_weights(np.ones((4, 8) + k,
                                                                                 np.int8)),
                                                  0, 1 << 30, 31, 0, False, np.uint8, s, p, d),
}


@pytest.mark.parametrize("case", small_kernel(BAD))
@pytest.mark.parametrize("conv", INT8_CONVS)
def test_int8_convs_refuse(conv, case):
    k, s, p, d = BAD[case]
    refuses(lambda: INT8_CONVS[conv](k, s, p, d))


def test_int8_convs_refuse_bad_weights_and_groups():
    w = np.ones((6, 2, 3, 3), np.int8)
    run = _int8_conv(w, 3, (1, 1), (1, 1, 1, 1), (1, 1))      # takes 6 channels
    refuses(lambda: run(XU8, 0), "8 channels, weights \\(6, 2, 3, 3\\) in 3 groups take 6")
    three = np.ones((3, 8, 3, 3), np.int8)
    # a weights shape that disagrees with the packed bytes: edited, zero, negative, huge
    for wshape in [(3, 8, 9, 9), (3, 8, 0, 3), (3, 8, -3, -3), (3, 8, HUGE, HUGE),
                   (3, 8, 2 ** 32, 2 ** 32), (3, 0, 3, 3), (6, 8, 3, 3)]:
        refuses(lambda: _int8_conv(three, 1, (1, 1), Z4, (1, 1), wshape))
    for groups in (0, -1, 2):   # 2 does not divide OC 3
        refuses(lambda: _int8_conv(three, 1, (1, 1), Z4, (1, 1), bind_groups=groups))
    depthwise = _int8_conv(np.ones((3, 1, 3, 3), np.int8), 3, (1, 1), Z4, (1, 1))
    refuses(lambda: depthwise(XU8, 0), "8 channels")    # 8 groups do not divide OC 3


@pytest.mark.parametrize("k,p,groups", [(8, 0, 1), (3, 1, 1), (3, 4, 1), (8, 0, 8), (3, 4, 8),
                                        (5, 2, 2)])
def test_int8_convs_at_the_edge_match_the_reference(k, p, groups):
    """kernel == input, padding == half the kernel and padding > kernel (valid: outputs that
    see only the zero point's padding), convolution, grouped and depthwise."""
    w = RNG.integers(-128, 128, (8, 8 // groups, k, k), dtype=np.int8)
    bias, (mult, shift) = RNG.integers(-500, 500, 8, dtype=np.int32), \
        R.quantize_multiplier(np.full(8, 0.002))
    args = (XU8, 7, w, bias, mult, shift, 3, False, np.uint8, 1, p, 1, groups)
    check_quant(lambda *a: K.conv2d(a[0], a[1], K.pack_weights(a[2], groups), *a[3:12]),
                R.qconv2d, *args, what=f"k {k} p {p} groups {groups}")


# ------------------------------------------------------------------ int8 GEMM and the rest

def test_int8_gemm_and_linear_refuse_bad_sizes():
    x = np.ones((3, 16), np.uint8)
    packed, sums = _C.int8_pack_weights(np.ones((1, 5, 16), np.int8))
    ones = np.ones(5, np.int32)
    for n in [0, -1, 4, 6, HUGE, 2 ** 62]:
        refuses(lambda: _C.int8_gemm_s32(x, 0, packed, sums, n))
        refuses(lambda: _C.int8_linear(x, 0, packed, sums, n, ones, ones, ones, 0, False,
                                       False))
    refuses(lambda: _C.int8_gemm_s32(np.ones((3, 0), np.uint8), 0, packed, sums, 5))
    refuses(lambda: _C.int8_gemm_s32(x[:, :12], 0, packed, sums, 5))
    refuses(lambda: _C.int8_split_narrow(np.zeros(64, np.int8), 2 ** 40, 2 ** 40, 4))
    refuses(lambda: _C.int8_split_narrow(np.zeros(64, np.int8), 1, 4, 6))
    if ty.current_isa() != "generic":   # the FMA loop needs AVX2 (RuntimeError below)
        for steps in (0, -5, 2 ** 40):
            with pytest.raises(ValueError, match="steps"):
                _C.testing.fma_peak(steps)


# ------------------------------------------------------------------ a hostile graph file

class _PoolNet(nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.quant, self.pool, self.dequant = nn.QuantStub(), pool, nn.DequantStub()

    def forward(self, x):
        return self.dequant(self.pool(self.quant(x)))


@pytest.mark.parametrize("pool,kernel", [(nn.AvgPool2d(2), 9), (nn.AvgPool2d(2), 64),
                                         (nn.AvgPool2d(2), 20000), (nn.MaxPool2d(2), HUGE)])
def test_a_graph_file_with_an_edited_pool_kernel_raises(tmp_path, pool, kernel):
    """A saved int8 graph whose pool's kernel_size is edited (checksums made anew) runs into
    the native check in the load's trial run: an error naming the file and the kernel, not a
    wrong output or a fault."""
    qat = Q.quantize_qat(_PoolNet(pool))
    Q.calibrate(qat, [XF])
    path = tmp_path / "pool.graph"
    graph = jit.trace(Q.quantize(qat), ty.tensor(XF))
    graph.save(path)
    want = graph(ty.tensor(XF)).numpy()
    data = ty.load(path)
    (state,) = [m for m in data["modules"] if m["class"].endswith("Pool2d")]
    assert state["config"]["kernel_size"] == 2
    state["config"]["kernel_size"] = kernel
    ty.save(data, path)   # tianyuan.save writes the checksums of the edited file
    start = time.perf_counter()
    with pytest.raises(SerializationError, match=f"{path}: step .* cannot run: ValueError: "
                                                 f".*kernel height {kernel} is larger than"):
        ty.runtime.load(path)
    assert time.perf_counter() - start < 0.5
    state["config"]["kernel_size"] = 2
    ty.save(data, path)
    np.testing.assert_array_equal(ty.runtime.load(path)(ty.tensor(XF)).numpy(), want)
