"""Native int8 add, concat, max/avg pooling: bit-exact on every ISA path."""
import numpy as np
import pytest
from helpers import check_quant, guarded_copy

from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R


def _q(rng, shape, dtype):
    lo, hi = R.qrange(dtype)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


@pytest.mark.parametrize("shape", [(1,), (3, 5), (2, 3, 7, 9), (1, 70000)])
@pytest.mark.parametrize("scales", [(0.02, 0.05, 0.06), (0.1, 0.01, 0.03), (0.5, 0.5, 0.01)])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype,zps", [(np.uint8, (120, 3, 128)), (np.int8, (0, 0, 0)),
                                       (np.int8, (5, -9, 2))])
def test_add(shape, scales, relu, dtype, zps):
    rng = np.random.default_rng(len(shape))
    a, b = _q(rng, shape, dtype), _q(rng, shape, dtype)
    ma, mb, shift = R.add_multipliers(*scales)
    args = (a, zps[0], b, zps[1], ma, mb, shift, zps[2], relu, dtype)
    check_quant(lambda: K.add(*args), lambda: R.add(*args))


# (m_a, m_b, shift) at the edges of the add's and the concat's 16-bit form (int8_ops.h,
# Split16: shifts 17..47, high halves of the multipliers within int16) and past them (the s64
# form).
ADD_EDGES = [(2 ** 31 - 2 ** 15 - 1, 2 ** 30 + 12345, 31),   # largest high half 32767
             (2 ** 31 - 1, 2 ** 30, 31),                      # high half 32768: s64
             (40000, -1234, 17), (-(2 ** 31), 77777, 20),      # shift 17, negative m
             (70000, 3, 16), (2 ** 30, 2 ** 30 + 1, 32),        # shift 16: s64
             (2 ** 30, 2 ** 29, 38),
             (2 ** 31 - 2 ** 15 - 1, -(2 ** 30), 47),           # the largest 16-bit shift
             # (|d * m| < 2^40 rounds to 0 at shifts 47-48: those check the form's range)
             (2 ** 30, 2 ** 30 - 1, 48)]                        # shift 48: s64


@pytest.mark.parametrize("m_a,m_b,shift", ADD_EDGES)
@pytest.mark.parametrize("dtype,zps", [(np.uint8, (255, 0, 7)), (np.int8, (-128, 127, -3))])
def test_add_multiplier_edges(m_a, m_b, shift, dtype, zps):
    rng = np.random.default_rng(shift)
    a, b = _q(rng, (3, 1000), dtype), _q(rng, (3, 1000), dtype)
    args = (a, zps[0], b, zps[1], m_a, m_b, shift, zps[2], False, dtype)
    check_quant(lambda: K.add(*args), lambda: R.add(*args))


@pytest.mark.parametrize("dtype,zp", [(np.uint8, 0), (np.uint8, 131), (np.int8, 0),
                                      (np.int8, -7)])
@pytest.mark.parametrize("size", [1, 17, 70001])
def test_quantize(dtype, zp, size):
    """Native float -> int8 against the reference: exact ties (k + 1/2) * scale round to
    even, far out-of-range values saturate, NaN gives the lowest value."""
    rng = np.random.default_rng(size)
    scale = np.float32(0.037)
    x = (rng.standard_normal(size) * 4).astype(np.float32)
    ties = (rng.integers(-300, 300, size) + 0.5).astype(np.float32) * scale
    x[::3] = ties[::3]
    x[:8] = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e20, 0.0, -0.0],
                     np.float32)[:min(size, 8)]
    check_quant(lambda: K.quantize(x, scale, zp, dtype),
                lambda: R.quantize(x, scale, zp, dtype))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype,zps", [(np.uint8, (10, 200, 128, 77)), (np.int8, (0, 0, 0, 0))])
def test_concat(axis, dtype, zps):
    rng = np.random.default_rng(3)
    shapes = [(2, 3, 4, 5), (2, 3, 4, 5), (2, 3, 4, 5)]
    xs = [_q(rng, s, dtype) for s in shapes]
    real = np.array([0.04, 0.01, 0.02]) / 0.02               # the last one is exactly 1
    m, s = R.quantize_multiplier(real)
    args = (xs, zps[:3], m, s, zps[3], dtype, axis)
    check_quant(lambda: K.concat(*args), lambda: R.concat(*args))


@pytest.mark.parametrize("dtype,zps", [(np.uint8, (37, 250, 200)), (np.int8, (-5, 90, 3))])
@pytest.mark.parametrize("rows,inner", [(3, 300), (70, 1000)])  # 70 x 1000 > 2^16: threaded
def test_concat_rescales_every_byte_value(dtype, zps, rows, inner):
    """A part's rescale is a function of its byte (the vnni level looks it up in a table of
    the formula): all 256 values, in rows that end in a partial vector step, with both ends
    of the output range reached."""
    every = np.resize(np.arange(256, dtype=np.uint8).view(dtype), rows * inner)
    xs = [every.reshape(1, rows, inner), np.roll(every, 7).reshape(1, rows, inner)]
    m, s = R.quantize_multiplier([0.37, 2.9])
    args = (xs, zps[:2], m, s, zps[2], dtype, 1)
    check_quant(lambda: K.concat(*args), lambda: R.concat(*args))
    rows_args = args[:-1] + (2,)                             # rows of 2 * inner bytes
    check_quant(lambda: K.concat(*rows_args), lambda: R.concat(*rows_args))


@pytest.mark.parametrize("m_a,m_b,shift", ADD_EDGES)
@pytest.mark.parametrize("dtype,zps", [(np.uint8, (255, 0, 7)), (np.int8, (-128, 127, -3))])
def test_concat_multiplier_edges(m_a, m_b, shift, dtype, zps):
    """The add's edge multipliers and shifts as the two parts' rescales (rows of 37)."""
    rng = np.random.default_rng(shift + 1)
    xs = [_q(rng, (2, 3, 37), dtype), _q(rng, (2, 5, 37), dtype)]
    args = (xs, zps[:2], [m_a, m_b], [shift, shift], zps[2], dtype, 1)
    check_quant(lambda: K.concat(*args), lambda: R.concat(*args))


@pytest.mark.parametrize("shuffle,axis", [(True, 1), (False, 1), (False, -1), (False, 2),
                                          (False, 0)])
def test_concat_reads_channel_slices_in_place(shuffle, axis):
    """Parts that are channel slices of one tensor (ShuffleNetV2's split) are read in place
    (joined along axis 0: copied); other strided views are copied first; all as if
    contiguous."""
    rng = np.random.default_rng(3)
    whole = _q(rng, (3, 10, 5, 7), np.uint8)
    parts = [whole[:, :5], whole[:, 5:], whole[:, :, :, ::-1][:, 2:7]]
    m, s = R.quantize_multiplier([0.7, 1.3, 0.4])
    args = (parts, (3, 200, 9), m, s, 6, np.uint8, axis)
    want = R.concat(*[[np.ascontiguousarray(x) for x in parts]] + list(args[1:]))
    if shuffle:
        want = want.reshape(3, 3, 5, 5, 7).transpose(0, 2, 1, 3, 4).reshape(want.shape)
    check_quant(lambda: K.concat(*args, shuffle=shuffle), lambda: want)


def test_concat_errors_name_the_parts():
    a, b = np.zeros((2, 3, 4), np.uint8), np.zeros((2, 5, 3), np.uint8)
    one = ([1 << 30] * 2, [30] * 2)
    with pytest.raises(ValueError, match=r"match outside axis 1, got \(2, 3, 4\), \(2, 5, 3\)"):
        K.concat([a, b], (0, 0), *one, 0, np.uint8, 1)
    with pytest.raises(ValueError, match="axis 3 is outside the parts' 3 dimensions"):
        K.concat([a, a], (0, 0), *one, 0, np.uint8, 3)
    with pytest.raises(ValueError, match=r"output zero point 200 is outside \[-128, 127\]"):
        K.concat([a, a], (0, 0), *one, 200, np.int8, 1)
    with pytest.raises(ValueError, match="shift 63 of part 1"):
        K.concat([a, a], (0, 0), one[0], [30, 63], 0, np.uint8, 1)
    with pytest.raises(ValueError, match="one zero point, multiplier and shift per part"):
        K.concat([a, a], (0,), *one, 0, np.uint8, 1)
    with pytest.raises(ValueError, match=r"part 1 \(2, 3, 4\): input must be uint8 or int8"):
        K.concat([a, a.astype(np.int32)], (0, 0), *one, 0, np.uint8, 1)


def test_concat_channels_of_different_widths():
    rng = np.random.default_rng(4)
    xs = [_q(rng, (2, c, 3, 3), np.uint8) for c in (1, 5, 2)]
    m, s = R.quantize_multiplier([0.7, 1.3, 1.0])
    args = (xs, (3, 4, 5), m, s, 6, np.uint8, 1)
    check_quant(lambda: K.concat(*args), lambda: R.concat(*args))


@pytest.mark.parametrize("parts,dtype", [(2, np.uint8), (3, np.int8)])
def test_concat_shuffle_is_concat_then_channel_shuffle(parts, dtype):
    rng = np.random.default_rng(5)
    xs = [_q(rng, (2, 3, 4, 5), dtype) for _ in range(parts)]
    m, s = R.quantize_multiplier(np.linspace(0.5, 1.5, parts))
    zps = (7, 100, 3)[:parts] if dtype == np.uint8 else (0,) * parts
    args = (xs, zps, m, s, 9 if dtype == np.uint8 else 0, dtype, 1)
    joined = R.concat(*args)                  # (2, 3 * parts, 4, 5), then the shuffle
    want = joined.reshape(2, parts, 3, 4, 5).transpose(0, 2, 1, 3, 4).reshape(joined.shape)
    check_quant(lambda: K.concat(*args, shuffle=True), lambda: want)
    with pytest.raises(ValueError, match="shuffle needs parts of one shape"):
        K.concat([xs[0], xs[1][:, :2]], zps[:2], m[:2], s[:2], 0, dtype, 1, shuffle=True)


POOLS = [((2, 3, 8, 8), 2, 2, 0), ((1, 4, 9, 7), 3, 2, 1), ((1, 2, 7, 7), 7, 1, 0),
         ((2, 3, 10, 11), (3, 2), (2, 1), (1, 1)), ((1, 1, 5, 6), 3, 1, (1, 1, 0, 1)),
         ((1, 2, 5, 150), 3, 2, 1), ((1, 2, 4, 139), (2, 5), 1, (0, 2)),  # rows > 1 step
         ((1, 1, 9, 9), 3, 3, 0),                                          # stride 3: scalar
         ((2, 3, 6, 5), (2, 5), (2, 1), 0),   # unpadded, windows as wide as the rows
         ((1, 20, 7, 7), 7, 7, 0),            # global pooling: one run of 49 bytes a plane
         ((2, 5, 15, 14), (15, 14), 1, 0),    # runs of 210 bytes: 64 at a time and a tail
         ((2, 64, 32, 32), 4, 4, 0),          # unpadded, parallel
         ((2, 8, 64, 70), 3, 2, 1)]           # the ResNet stem's pool, parallel


@pytest.mark.parametrize("shape,kernel,stride,padding", POOLS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_max_pool2d(shape, kernel, stride, padding, dtype):
    x = _q(np.random.default_rng(5), shape, dtype)
    check_quant(lambda: K.max_pool2d(x, kernel, stride, padding),
                lambda: R.max_pool2d(x, kernel, stride, padding))


@pytest.mark.parametrize("width", [64, 70, 150])
def test_max_pool2d_reads_nothing_past_the_input(width):
    """The input's last byte the last of a readable page: AVX-512 loads a row's whole 64-byte
    steps unmasked and only a part-filled last step masked."""
    x, keep = guarded_copy(_q(np.random.default_rng(6), (2, 3, 5, width), np.uint8))
    check_quant(lambda: K.max_pool2d(x, 3, 2, 1), lambda: R.max_pool2d(x, 3, 2, 1))
    del x, keep


@pytest.mark.parametrize("shape,kernel,stride,padding", POOLS)
@pytest.mark.parametrize("dtype,zp", [(np.uint8, 0), (np.uint8, 131), (np.int8, 0), (np.int8, -20)])
@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool2d(shape, kernel, stride, padding, dtype, zp, include_pad):
    x = _q(np.random.default_rng(6), shape, dtype)
    check_quant(lambda: K.avg_pool2d(x, zp, kernel, stride, padding, include_pad),
                lambda: R.avg_pool2d(x, zp, kernel, stride, padding, include_pad))


def test_add_and_concat_modules_follow_their_inputs_quantization():
    """The quantized Add and Concat prepare their native call once per tuple of input scales
    and zero points (kernels.PreparedAdd / PreparedConcat): inputs on another grid, even one
    that differs in the zero point alone, get their own call, as the reference has it."""
    from tianyuan import nn
    from tianyuan.quantization.observer import QParams
    from tianyuan.quantization.qarray import wrap
    rng = np.random.default_rng(9)
    out = QParams(np.float32(0.05), 7, np.uint8, None)
    add, cat = nn.quantized.AddReLU(), nn.quantized.Concat()
    add.set_output(out)
    cat.set_output(out)
    cat.axis, cat.shuffle = 1, False
    values = [_q(rng, (1, 3, 4, 5), np.uint8) for _ in range(2)]
    for qparams in [((0.04, 3), (0.06, 9)), ((0.04, 4), (0.06, 9)), ((0.03, 3), (0.07, 2))]:
        (sa, za), (sb, zb) = qparams
        a, b = wrap(values[0], sa, za), wrap(values[1], sb, zb)
        ma, mb, shift = R.add_multipliers(np.float32(sa), np.float32(sb), np.float32(0.05))
        got = add(a, b).data.view(np.ndarray)
        np.testing.assert_array_equal(
            got, R.add(values[0], za, values[1], zb, ma, mb, shift, 7, True, np.uint8))
        m, s = R.quantize_multiplier(np.array([np.float32(sa), np.float32(sb)], np.float64)
                                     / np.float32(0.05))
        got = cat([a, b]).data.view(np.ndarray)
        np.testing.assert_array_equal(got, R.concat(values, [za, zb], m, s, 7, np.uint8))
