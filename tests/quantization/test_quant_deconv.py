"""int8 transposed convolution (ConvTranspose2d): the numpy reference against the float
op on dequantized values, and the native kernel (framework/csrc/int8_deconv/) bit-exact to the
reference on every ISA path, with its argument checks. The modules: test_qat_deconv.py."""
import numpy as np
import pytest
from helpers import check_quant, guarded_copy

import tianyuan as ty
import tianyuan.functional as F
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R

# n, c, h, w, oc, kh, kw, stride, padding, output_padding, dilation, groups
CASES = [
    (2, 3, 3, 3, 2, 3, 3, 1, 0, 0, 1, 1),
    (1, 5, 3, 4, 3, 3, 3, 2, 1, 1, 1, 1),                      # stride 2, output_padding
    (1, 4, 3, 3, 4, 2, 3, (2, 3), (0, 1), (1, 2), 1, 2),       # groups, rectangular
    (1, 2, 3, 3, 2, 3, 3, 1, 1, 1, 2, 1),                      # output_padding < dilation
    (2, 3, 2, 2, 3, 3, 3, 2, 1, 0, 1, 3),                      # depthwise
    (3, 20, 4, 4, 17, 4, 4, 2, 1, 0, 1, 1),                    # DCGAN's 4x4 stride 2 up
    (1, 7, 1, 1, 33, 2, 2, 1, 0, 0, 1, 1),                     # z as a 1x1 map
    (1, 6, 5, 3, 4, 1, 1, 3, 0, 2, 1, 2),                      # stride > kernel: gaps
    (1, 3, 4, 5, 2, 3, 2, 1, (3, 0, 1, 2), 0, (2, 1), 1),      # crop more than a tap
    (2, 36, 6, 5, 20, 3, 3, 2, 2, 1, 1, 4),                    # lanes past 16, groups
]


def deconv_case(rng, case, in_dtype):
    n, c, h, w, oc, kh, kw, stride, padding, output_padding, dilation, groups = case
    lo, hi = R.qrange(in_dtype)
    x = rng.integers(lo, hi + 1, (n, c, h, w)).astype(in_dtype)
    wt = rng.integers(-128, 128, (c, oc // groups, kh, kw)).astype(np.int8)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    mult, shift = R.quantize_multiplier(rng.uniform(2e-4, 4e-3, oc))
    geom = dict(stride=stride, padding=padding, output_padding=output_padding,
                dilation=dilation)
    return x, wt, bias, mult, shift, geom, groups


def _float_padding(padding):
    p = R._quad(padding)
    return p if len(p) == 4 else (p[0], p[0], p[1], p[1])


@pytest.mark.parametrize("case", CASES)
def test_reference_is_the_float_op_on_dequantized_values(case):
    rng = np.random.default_rng(sum(np.ravel(case[:7])))
    x, wt, _, _, _, geom, groups = deconv_case(rng, case, np.uint8)
    acc = R.conv_transpose2d(x, 77, wt, groups=groups, **geom)
    want = F.conv_transpose2d(ty.tensor(x.astype(np.float64) - 77), ty.tensor(wt.astype(
        np.float64)), None, geom["stride"], _float_padding(geom["padding"]),
        geom["output_padding"], groups, geom["dilation"]).numpy()
    assert acc.dtype == np.int32
    np.testing.assert_array_equal(acc, want)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("in_dtype,in_zp,out_dtype,out_zp",
                         [(np.uint8, 117, np.uint8, 64), (np.int8, 0, np.int8, 0),
                          (np.int8, -3, np.uint8, 128)])
def test_conv_transpose2d(case, relu, in_dtype, in_zp, out_dtype, out_zp):
    rng = np.random.default_rng(sum(np.ravel(case[:7])))
    x, wt, bias, mult, shift, geom, groups = deconv_case(rng, case, in_dtype)
    packed = K.pack_deconv_weights(wt, groups)
    args = (bias, mult, shift, out_zp, relu, out_dtype)
    check_quant(lambda: K.conv_transpose2d(x, in_zp, packed, *args, **geom),
                lambda: R.qconv_transpose2d(x, in_zp, wt, *args, groups=groups, **geom),
                what=str(case))


@pytest.mark.parametrize("threads", [1, 2])
def test_out_max_threads_and_nothing_read_past_the_input(threads):
    """ReLU6's clamp, 1 and 2 threads, the input ending on a readable page's last byte, and a
    batch split into several chunks of columns (kChunkBytes: 16 MiB of int32)."""
    rng = np.random.default_rng(5)
    case = (40, 16, 16, 16, 64, 4, 4, 2, 1, 0, 1, 1)   # 40 x 256 x 1024 columns: 3 chunks
    x, wt, bias, mult, shift, geom, groups = deconv_case(rng, case, np.uint8)
    x, keep = guarded_copy(x)
    packed = K.pack_deconv_weights(wt, groups)
    args = (bias, mult, shift, 9, True, np.uint8)
    before = ty.get_num_threads()
    try:
        ty.set_num_threads(threads)
        check_quant(lambda: K.conv_transpose2d(x, 201, packed, *args, **geom, out_max=150),
                    lambda: np.minimum(R.qconv_transpose2d(x, 201, wt, *args, **geom), 150))
    finally:
        ty.set_num_threads(before)
    del x, keep


def _prepared(wshape=(4, 3, 3, 3), groups=1, **geom):
    wt = np.ones(wshape, np.int8)
    oc = wshape[1] * groups
    z = np.zeros(oc, np.int32)
    m, s = R.quantize_multiplier(np.full(oc, 0.01))
    return K.PreparedDeconv(K.pack_deconv_weights(wt, groups), z, m, s, 0, False, np.uint8,
                            **geom)


@pytest.mark.parametrize("geom,x_shape,match", [
    ({}, (1, 5, 4, 4), "has 5 channels, the weights take 4"),
    ({}, (4, 4, 4), r"x must be \(N, C, H, W\)"),
    ({"stride": 2, "output_padding": 2}, (1, 4, 4, 4), "output_padding 2"),
    ({"stride": 0}, (1, 4, 4, 4), "stride 0"),
    ({"padding": 3}, (1, 4, 1, 1), "output size .* is not positive"),
    ({"stride": 2 ** 62}, (1, 4, 5, 5), "overflows int64"),
    ({}, (1, 4, 0, 3), "is empty"),
])
def test_geometry_errors(geom, x_shape, match):
    with pytest.raises(ValueError, match=match):
        _prepared(**geom)(np.zeros(x_shape, np.uint8), 0)


def test_argument_errors():
    deconv = _prepared()
    with pytest.raises(ValueError, match="input zero point 300"):
        deconv(np.zeros((1, 4, 3, 3), np.uint8), 300)
    with pytest.raises(ValueError, match="uint8 or int8"):
        deconv(np.zeros((1, 4, 3, 3), np.float32), 0)
    with pytest.raises(ValueError, match="C divisible by groups=3"):
        K.pack_deconv_weights(np.ones((4, 3, 3, 3), np.int8), 3)
    packed = K.pack_deconv_weights(np.ones((4, 3, 3, 3), np.int8))
    z = np.zeros(3, np.int32)
    with pytest.raises(ValueError, match="do not match weights"):
        ty._C.Int8Deconv(packed.packed[:-16], packed.row_sums, (4, 3, 3, 3), 1, (1, 1),
                         (0, 0, 0, 0), (0, 0), (1, 1), z, z + 2 ** 30, z + 30, 0, False, False,
                         255)
    with pytest.raises(ValueError, match="need 3 entries"):
        ty._C.Int8Deconv(packed.packed, packed.row_sums, (4, 3, 3, 3), 1, (1, 1),
                         (0, 0, 0, 0), (0, 0), (1, 1), z[:2], z + 2 ** 30, z + 30, 0, False,
                         False, 255)
    empty = deconv(np.zeros((0, 4, 3, 3), np.uint8), 0)
    assert empty.shape == (0, 3, 5, 5)


def _random_case(rng):
    """A small random geometry whose output is non-empty: any stride, dilation, 4-sided padding
    (cropping past whole taps too), output_padding below max(stride, dilation), groups."""
    while True:
        groups = int(rng.choice([1, 1, 2, 3]))
        c, oc = groups * int(rng.integers(1, 6)), groups * int(rng.integers(1, 20))
        kh, kw, sh, sw, dh, dw = (int(v) for v in rng.integers(1, [5, 5, 4, 4, 3, 3]))
        pad = tuple(int(v) for v in rng.integers(0, 4, 4))
        op = (int(rng.integers(0, max(sh, dh))), int(rng.integers(0, max(sw, dw))))
        h, w = (int(v) for v in rng.integers(1, 7, 2))
        oh = R.conv_transpose_out_size(h, kh, sh, pad[0], pad[1], dh, op[0])
        ow = R.conv_transpose_out_size(w, kw, sw, pad[2], pad[3], dw, op[1])
        if oh >= 1 and ow >= 1:
            return (int(rng.integers(1, 4)), c, h, w, oc, kh, kw, (sh, sw), pad, op, (dh, dw),
                    groups)


@pytest.mark.parametrize("seed", range(24))
def test_random_geometries(seed):
    """The reference against the float op, the kernel against the reference."""
    rng = np.random.default_rng(1000 + seed)
    case = _random_case(rng)
    in_dtype, in_zp = [(np.uint8, 131), (np.int8, -9)][seed % 2]
    x, wt, bias, mult, shift, geom, groups = deconv_case(rng, case, in_dtype)
    acc = R.conv_transpose2d(x, in_zp, wt, groups=groups, **geom)
    want = F.conv_transpose2d(ty.tensor(x.astype(np.float64) - in_zp), ty.tensor(wt.astype(
        np.float64)), None, geom["stride"], geom["padding"], geom["output_padding"], groups,
        geom["dilation"]).numpy()
    np.testing.assert_array_equal(acc, want, err_msg=str(case))
    packed = K.pack_deconv_weights(wt, groups)
    args = (bias, mult, shift, 17, seed % 3 == 0, np.uint8)
    check_quant(lambda: K.conv_transpose2d(x, in_zp, packed, *args, **geom),
                lambda: R.qconv_transpose2d(x, in_zp, wt, *args, groups=groups, **geom),
                what=str(case))
