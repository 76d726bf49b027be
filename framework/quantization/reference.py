"""The living spec of int8 arithmetic: numpy, int64, every native kernel is bit-exact to it.

Numbers
-------
- activations: uint8 asymmetric (zero point 0..255) or int8 (zero point usually 0);
- weights: int8 symmetric per output channel (zero point 0);
- bias: int32 at scale ``s_in * s_w[oc]``; accumulators int32.

Requantization (the one rounding rule used everywhere)
------------------------------------------------------
The real multiplier ``M = s_in * s_w[oc] / s_out`` is stored per channel as an int32
``m`` in [2**30, 2**31) and a right shift ``shift`` in [1, 62] with ``M ~= m * 2**-shift``
(:func:`quantize_multiplier`). With ``t = acc + bias`` (must fit int32)::

    y = (int64(t) * m + 2**(shift - 1)) >> shift          # arithmetic shift = floor
    q = clip(y, lo - zp, hi - zp) + zp                     # lo = zp under relu

i.e. ONE rounding, round-half-up (towards +inf), done exactly in int64. Why this form:
|t * m| < 2**62 never overflows int64; it is one widening multiply (vpmuldq), one add
and one shift per lane on AVX2/AVX-512, with no double rounding (gemmlowp's
rounding-doubling-high-mul + rounding shift rounds twice and costs more); and with a
31-bit multiplier a tie (low ``shift`` bits exactly ``2**(shift-1)``) is so rare that
half-up vs half-even/away-from-zero has no statistical effect. Clamping before adding
the zero point keeps every intermediate inside int32 on the SIMD side.

Multi-input ops (add) use the same rule with one shared shift: ``y = (sum_i
(q_i - z_i) * m_i + 2**(s-1)) >> s``. Average pooling keeps the input's scale and
zero point and rounds ``sum / count`` half-up in integers.

>>> m, s = quantize_multiplier(np.array([0.25]))
>>> requantize(np.array([[10, -10]], np.int32), np.zeros(2, np.int32),
...            np.repeat(m, 2), np.repeat(s, 2), 128, False, np.uint8)
array([[131, 126]], dtype=uint8)
"""
import warnings

import numpy as np

INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


_QRANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def qrange(dtype):
    """(qmin, qmax) of uint8 or int8."""
    dtype = np.dtype(dtype)
    if dtype not in _QRANGES:
        raise ValueError(f"quantization: dtype must be uint8 or int8, got {dtype}")
    return _QRANGES[dtype]


def _channel_shape(ndim, axis):
    """Shape that broadcasts a per-channel (C,) vector along `axis` of an ndim array."""
    shape = [1] * ndim
    shape[axis] = -1
    return shape


def quantize(x, scale, zero_point, dtype, axis=None):
    """float x -> q = clip(round_half_even(x / scale) + zero_point); per channel if axis.
    NaN gives the lowest value; x / scale in float32 (IEEE division, as the native twin).

    x (...); scale, zero_point scalars, or (C,) with C = x.shape[axis].
    """
    scale = np.asarray(scale, np.float32)
    zero_point = np.asarray(zero_point, np.int64)
    if axis is not None:
        scale = scale.reshape(_channel_shape(x.ndim, axis))
        zero_point = zero_point.reshape(_channel_shape(x.ndim, axis))
    lo, hi = qrange(dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are clamped below
        q = np.rint(np.asarray(x, np.float32) / scale)
    # clamp while still float (NaN to the low end, as vmaxps does), so that huge values
    # saturate instead of wrapping in the integer cast
    q = np.minimum(np.fmax(q, (lo - zero_point).astype(np.float32)),
                   (hi - zero_point).astype(np.float32))
    return (q.astype(np.int64) + zero_point).astype(dtype)


def dequantize(q, scale, zero_point, axis=None):
    """q (...) -> float32 (q - zero_point) * scale; per channel if axis."""
    scale = np.asarray(scale, np.float32)
    zero_point = np.asarray(zero_point, np.int64)
    if axis is not None:
        scale = scale.reshape(_channel_shape(q.ndim, axis))
        zero_point = zero_point.reshape(_channel_shape(q.ndim, axis))
    return ((q.astype(np.int64) - zero_point).astype(np.float32) * scale).astype(np.float32)


def quantize_multiplier(real):
    """Real multipliers (C,) in [0, 65536) -> (m int32 (C,), shift int32 (C,)).

    m in [2**30, 2**31), shift in [1, 62], real ~= m * 2**-shift (relative error < 2**-31).
    Multipliers below 2**-32 keep shift 62 and lose precision; 0 gives m = 0.
    """
    real = np.atleast_1d(np.asarray(real, np.float64))
    if np.any(real < 0) or np.any(real >= 2.0 ** 16) or not np.all(np.isfinite(real)):
        raise ValueError(f"quantize_multiplier: multipliers must be in [0, 65536), got "
                         f"min {real.min()} max {real.max()}")
    frac, exp = np.frexp(real)                        # real = frac * 2**exp, frac in [0.5, 1)
    m = np.rint(frac * 2.0 ** 31).astype(np.int64)
    carry = m == 2 ** 31                              # frac rounded up to 1.0
    m = np.where(carry, 2 ** 30, m)
    shift = 31 - exp.astype(np.int64) - carry
    small = shift > 62                                # keep shift <= 62: fewer bits in m
    m = np.where(small, np.rint(np.minimum(real, 2.0 ** -31) * 2.0 ** 62).astype(np.int64), m)
    shift = np.where(small, 62, shift)                 # real == 0: m = 0, shift = 31
    return m.astype(np.int32), shift.astype(np.int32)


def _round_shift(p, shift):
    """floor((p + 2**(shift-1)) / 2**shift) for int64 p, shift >= 1 (round half up)."""
    shift = np.asarray(shift, np.int64)
    return np.right_shift(p + np.left_shift(np.int64(1), shift - 1), shift)


def _clamp_zero_point(y, zero_point, relu, dtype):
    """q = clip(y, lo - zp, hi - zp) + zp; lo = zp under relu."""
    lo, hi = qrange(dtype)
    if relu:
        lo = max(lo, int(zero_point))
    return (np.clip(y, lo - zero_point, hi - zero_point) + zero_point).astype(dtype)


def requantize(acc, bias, multiplier, shift, zero_point, relu, dtype, axis=-1):
    """int32 acc (..., C, ...) + int32 bias (C,) -> uint8/int8 with per-channel (m, shift).

    Channels lie along `axis`; bias, multiplier, shift are (C,) (or scalars).
    """
    shape = _channel_shape(acc.ndim, axis)
    t = acc.astype(np.int64) + np.asarray(bias, np.int64).reshape(shape)
    if t.size and (t.min() < INT32_MIN or t.max() > INT32_MAX):
        raise ValueError("requantize: acc + bias overflows int32")
    m = np.asarray(multiplier, np.int64).reshape(shape)
    y = _round_shift(t * m, np.asarray(shift, np.int64).reshape(shape))
    return _clamp_zero_point(y, int(zero_point), relu, dtype)


BIAS_LIMIT = 2 ** 30   # |bias_q| bound: acc + bias stays inside int32


def requant_params(s_in, w_scale, bias, s_out):
    """(bias int32 (OC,), m int32 (OC,), shift int32 (OC,)) of a layer with float bias (OC,)
    and weight scales w_scale (OC,), for input scale s_in and output scale s_out:
    ``bias = rint(b / (s_in * s_w))`` (clipped to +-BIAS_LIMIT) and the multipliers of
    ``s_in * s_w / s_out``, all in float64 from the float32 scales."""
    acc_scale = np.float64(s_in) * w_scale.astype(np.float64)          # (OC,)
    bias_q = np.rint(bias.astype(np.float64) / acc_scale)
    over = int(np.count_nonzero(np.abs(bias_q) > BIAS_LIMIT))
    if over:
        warnings.warn(f"int8: the bias of {over} of {len(bias_q)} output channels exceeds the "
                      f"int32 accumulator's range at input scale {s_in:.3g} (an input of "
                      "near-zero activations, as in an untrained model): clipped, so the int8 "
                      "layer differs from the float one by more than rounding", RuntimeWarning,
                      stacklevel=4)
    bias_q = np.clip(bias_q, -BIAS_LIMIT, BIAS_LIMIT)
    m, shift = quantize_multiplier(acc_scale / np.float64(s_out))
    return bias_q.astype(np.int32), m, shift


def relu6_max(scale, zero_point, dtype):
    return min(qrange(dtype)[1], int(zero_point) + int(np.rint(6.0 / scale)))


def exact_matmul(a, b):
    """np.matmul of integer arrays, exactly, on BLAS: float64 products and sums of integers
    are exact while every partial sum stays below 2**53, and the terms of an int32
    accumulator (|x - zp| <= 255, |w| <= 128) allow 2**53 / 32640, about 2.8e11 of them;
    numpy's own integer matmul runs without BLAS."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)


def _to_int32(acc, op):
    if acc.size and (acc.min() < INT32_MIN or acc.max() > INT32_MAX):
        raise ValueError(f"{op}: int32 accumulator overflow")
    return acc.astype(np.int32)


def gemm(a, a_zero_point, w):
    """a u8/s8 (M, K), w s8 (N, K) -> int32 (M, N) = (a - a_zero_point) @ w.T.

    Native kernels compute a @ w.T and subtract a_zero_point * row_sums(w) (N,),
    the weight-row-sum correction; the result is the same integer.
    """
    acc = exact_matmul(a.astype(np.int64) - int(a_zero_point), w.astype(np.int64).T)
    return _to_int32(acc, "gemm")


def row_sums(w):
    """s8 (N, K) -> int32 (N,) sums over K (the zero-point correction term)."""
    return w.astype(np.int64).reshape(w.shape[0], -1).sum(1).astype(np.int32)


def linear(x, x_zero_point, w, bias, multiplier, shift, out_zero_point, relu, dtype):
    """x (M, K) u8/s8, w s8 (N, K), bias int32 (N,) -> (M, N) requantized."""
    acc = gemm(x, x_zero_point, w)
    return requantize(acc, bias, multiplier, shift, out_zero_point, relu, dtype, axis=1)


def _pair(v):
    return (int(v), int(v)) if np.isscalar(v) else tuple(int(i) for i in v)


def _quad(padding):
    """int, (ph, pw) or (top, bottom, left, right) -> (top, bottom, left, right)."""
    p = (int(padding),) * 2 if np.isscalar(padding) else tuple(int(i) for i in padding)
    return (p[0], p[0], p[1], p[1]) if len(p) == 2 else p


def out_size(size, kernel, stride, pad_lo, pad_hi, dilation):
    """Output length of one spatial axis (floor mode)."""
    return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1


def im2col(x, kernel, stride, padding, dilation, pad_value):
    """x (N, C, H, W) -> cols (N, C*kh*kw, OH*OW), padded with pad_value (the zero point)."""
    (kh, kw), (sh, sw), (dh, dw) = _pair(kernel), _pair(stride), _pair(dilation)
    top, bottom, left, right = _quad(padding)
    n, c, h, w = x.shape
    oh = out_size(h, kh, sh, top, bottom, dh)
    ow = out_size(w, kw, sw, left, right, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=pad_value)
    cols = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                                  j * dw: j * dw + sw * (ow - 1) + 1: sw]
    return cols.reshape(n, c * kh * kw, oh * ow), (oh, ow)


def conv2d(x, x_zero_point, w, stride=1, padding=0, dilation=1, groups=1):
    """x u8/s8 (N, C, H, W), w s8 (OC, C/groups, kh, kw) -> int32 acc (N, OC, OH, OW).

    acc = sum (x - x_zero_point) * w; padding is x_zero_point, i.e. real zero.
    Depthwise is groups == C.
    """
    oc, cg, kh, kw = w.shape
    if x.shape[1] != cg * groups or oc % groups:
        raise ValueError(f"conv2d: input {x.shape}, weight {w.shape}, groups {groups} mismatch")
    cols, (oh, ow) = im2col(x, (kh, kw), stride, padding, dilation, x_zero_point)
    cols = cols.astype(np.int64).reshape(x.shape[0], groups, cg * kh * kw, oh * ow)
    cols -= int(x_zero_point)
    wg = w.astype(np.int64).reshape(groups, oc // groups, cg * kh * kw)
    acc = exact_matmul(wg[None], cols)                # (N, G, OC/G, OH*OW)
    return _to_int32(acc.reshape(x.shape[0], oc, oh, ow), "conv2d")


def qconv2d(x, x_zero_point, w, bias, multiplier, shift, out_zero_point, relu, dtype,
            stride=1, padding=0, dilation=1, groups=1):
    """Quantized conv: conv2d then requantize per output channel -> (N, OC, OH, OW)."""
    acc = conv2d(x, x_zero_point, w, stride, padding, dilation, groups)
    return requantize(acc, bias, multiplier, shift, out_zero_point, relu, dtype, axis=1)


def conv_transpose_out_size(size, kernel, stride, pad_lo, pad_hi, dilation, output_padding):
    """Output length of one spatial axis of a transposed conv (F.conv_transpose2d's)."""
    return (size - 1) * stride - pad_lo - pad_hi + dilation * (kernel - 1) + output_padding + 1


def conv_transpose2d(x, x_zero_point, w, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1):
    """x u8/s8 (N, C, H, W), w s8 (C, OC/groups, kh, kw) -> int32 acc (N, OC, OH, OW).

    The transpose of conv2d (ConvTranspose2d's weight layout): every input pixel scatters
    (x - x_zero_point) * w into the output at (y * stride + i * dilation - top, ...); padding
    crops the output, output_padding adds rows/columns at the bottom/right.
    """
    c, ocg, kh, kw = w.shape
    (sh, sw), (dh, dw), (oph, opw) = _pair(stride), _pair(dilation), _pair(output_padding)
    top, bottom, left, right = _quad(padding)
    n, _, h, wd = x.shape
    if groups < 1 or x.shape[1] != c or c % groups:
        raise ValueError(f"conv_transpose2d: input {x.shape}, weight {w.shape}, groups "
                         f"{groups} mismatch")
    if oph >= max(sh, dh) or opw >= max(sw, dw):
        raise ValueError(f"conv_transpose2d: output_padding {(oph, opw)} must be smaller than "
                         f"stride {(sh, sw)} or dilation {(dh, dw)}")
    oh = conv_transpose_out_size(h, kh, sh, top, bottom, dh, oph)
    ow = conv_transpose_out_size(wd, kw, sw, left, right, dw, opw)
    if oh < 1 or ow < 1:
        raise ValueError(f"conv_transpose2d: output size {(oh, ow)} is not positive")
    cg = c // groups
    xs = (x.astype(np.int64) - int(x_zero_point)).reshape(n, groups, cg, h, wd)
    wg = w.astype(np.int64).reshape(groups, cg, ocg, kh, kw)
    taps = wg.reshape(groups, cg, ocg * kh * kw).transpose(0, 2, 1)[None]
    cols = exact_matmul(taps, xs.reshape(n, groups, cg, h * wd)).reshape(
        n, groups, ocg, kh, kw, h, wd)                            # (N, G, OC/G, kh, kw, H, W)
    full = np.zeros((n, groups, ocg, max(top + oh, (h - 1) * sh + dh * (kh - 1) + 1),
                     max(left + ow, (wd - 1) * sw + dw * (kw - 1) + 1)), np.int64)
    for i in range(kh):
        for j in range(kw):
            full[..., i * dh: i * dh + sh * (h - 1) + 1: sh,
                 j * dw: j * dw + sw * (wd - 1) + 1: sw] += cols[:, :, :, i, j]
    acc = full[..., top: top + oh, left: left + ow].reshape(n, groups * ocg, oh, ow)
    return _to_int32(acc, "conv_transpose2d")


def qconv_transpose2d(x, x_zero_point, w, bias, multiplier, shift, out_zero_point, relu, dtype,
                      stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    """Quantized transposed conv: conv_transpose2d then requantize per output channel."""
    acc = conv_transpose2d(x, x_zero_point, w, stride, padding, output_padding, dilation,
                           groups)
    return requantize(acc, bias, multiplier, shift, out_zero_point, relu, dtype, axis=1)


def add_multipliers(scale_a, scale_b, scale_out):
    """(m_a, m_b, shift) for add: both real multipliers s_i / s_out share one shift."""
    real = np.array([scale_a / scale_out, scale_b / scale_out], np.float64)
    _, shift = quantize_multiplier(real.max())
    m = np.rint(real * 2.0 ** int(shift[0])).astype(np.int64)
    return int(m[0]), int(m[1]), int(shift[0])


def add(a, a_zero_point, b, b_zero_point, m_a, m_b, shift, out_zero_point, relu, dtype):
    """a, b (...) same shape and dtype -> (...) = requantized (a - za)*Ma + (b - zb)*Mb."""
    if a.shape != b.shape:
        raise ValueError(f"add: shapes differ, a {a.shape} b {b.shape}")
    p = ((a.astype(np.int64) - int(a_zero_point)) * int(m_a)
         + (b.astype(np.int64) - int(b_zero_point)) * int(m_b))
    return _clamp_zero_point(_round_shift(p, int(shift)), int(out_zero_point), relu, dtype)


def concat(xs, zero_points, multipliers, shifts, out_zero_point, dtype, axis=1):
    """Each x_i requantized from (s_i, z_i) to the output (s_out, out_zero_point), then joined.

    multipliers[i], shifts[i] = quantize_multiplier(s_i / s_out); (2**30, 30) is exactly 1.
    """
    parts = []
    for x, z, m, s in zip(xs, zero_points, multipliers, shifts):
        p = (x.astype(np.int64) - int(z)) * int(m)
        parts.append(_clamp_zero_point(_round_shift(p, int(s)), int(out_zero_point), False,
                                       dtype))
    return np.concatenate(parts, axis=axis)


def _windows(x, kernel, stride, padding, pad_value):
    """x (N, C, H, W) -> (N, C, kh*kw, OH, OW) windows, padded with pad_value."""
    n, c = x.shape[:2]
    cols, (oh, ow) = im2col(x, kernel, stride, padding, 1, pad_value)
    return cols.reshape(n, c, -1, oh, ow)


def max_pool2d(x, kernel, stride=None, padding=0):
    """x u8/s8 (N, C, H, W) -> (N, C, OH, OW); padding never wins (it is qmin)."""
    stride = kernel if stride is None else stride
    return _windows(x, kernel, stride, padding, qrange(x.dtype)[0]).max(2)


def avg_pool2d(x, zero_point, kernel, stride=None, padding=0, count_include_pad=True):
    """x u8/s8 (N, C, H, W) -> (N, C, OH, OW), same scale and zero point as x.

    q = zp + floor((2 * sum(x - zp) + count) / (2 * count)): sum / count rounded half up.
    """
    stride = kernel if stride is None else stride
    sums = _windows(x.astype(np.int64) - int(zero_point), kernel, stride, padding, 0).sum(2)
    if count_include_pad:
        count = np.int64(np.prod(_pair(kernel)))
    else:
        ones = np.ones((1, 1) + x.shape[2:], np.int64)
        count = _windows(ones, kernel, stride, padding, 0).sum(2)
    q = (2 * sums + count) // (2 * count) + int(zero_point)
    return q.astype(x.dtype)
