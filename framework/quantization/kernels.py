"""Native int8 kernels (tianyuan._C), bit-exact to `reference.py` on every ISA path.

Weights are packed once (`pack_weights`) and reused; activations are NCHW or channels-last
(conv, pooling, add: `layout.py`) or (M, K) (linear) uint8/int8 numpy arrays; requantization
parameters come from `reference.quantize_multiplier(s_in * s_w / s_out)` per output channel.

>>> import numpy as np
>>> from tianyuan.quantization import kernels, reference
>>> w = np.array([[1, -2, 3]], np.int8)
>>> m, s = reference.quantize_multiplier([0.5])
>>> kernels.linear(np.array([[10, 20, 30]], np.uint8), 10, kernels.pack_weights(w),
...                np.zeros(1, np.int32), m, s, 0, False, np.uint8)
array([[20]], dtype=uint8)
"""

import numpy as np

from .. import _C
from .layout import as_nhwc, channels_last_wins, is_channels_last, to_channels_last  # noqa: F401
from .packing import (PackedDeconvWeight, PackedWeight, pack_deconv_weights,  # noqa: F401
                      pack_weights, split_narrow)
from .peaks import amx_peak, avx2_peak, avxvnni_peak, vnni_peak  # noqa: F401
from .reference import _pair, _quad, qrange


def _params(n, *arrays):
    """Scalars or (n,) -> contiguous int32 (n,) each."""
    out = []
    for a in arrays:
        a = np.asarray(a, np.int64)
        if a.size not in (1, n):
            raise ValueError(f"quantized kernel: per-channel parameter has {a.size} entries, "
                             f"expected 1 or {n}")
        out.append(np.ascontiguousarray(np.broadcast_to(a.reshape(-1), (n,)), np.int32))
    return out


def _signed(dtype):
    return qrange(dtype)[0] < 0


def _input(x):
    x = np.ascontiguousarray(x)
    qrange(x.dtype)
    return x


def _check_linear(op, x, packed):
    if packed.packed is None or len(packed.shape) != 2:
        raise ValueError(f"{op}: weights must be packed from (N, K), got {packed.shape}")
    if x.ndim != 2 or x.shape[1] != packed.shape[1]:
        raise ValueError(f"{op}: x {x.shape} does not match weights (N, K) = {packed.shape}")


def gemm(x, x_zero_point, packed):
    """x u8/s8 (M, K) -> int32 (M, N) = (x - x_zero_point) @ W.T."""
    x = _input(x)
    _check_linear("gemm", x, packed)
    return _C.int8_gemm_s32(x, int(x_zero_point), packed.packed, packed.row_sums,
                            packed.shape[0])


def requantize(acc, bias, multiplier, shift, zero_point, relu, dtype):
    """int32 acc (M, N), per-column (N,) or scalar bias/multiplier/shift -> dtype (M, N)."""
    acc = np.ascontiguousarray(acc, np.int32)
    if acc.ndim != 2:
        raise ValueError(f"requantize: acc must be (M, N), got {acc.shape}")
    b, m, s = _params(acc.shape[1], bias, multiplier, shift)
    return _C.int8_requantize(acc, b, m, s, int(zero_point), bool(relu), _signed(dtype))


# PreparedLinear on the amx ISA runs the GEMM on AMX tiles from this many rows (M) and
# multiply-adds (M N K) on: below them the VNNI GEMM's shorter call wins (bench/RESULTS.md,
# int8 kernels: AMX, the int8 linear).
AMX_LINEAR_MIN_ROWS = 8
AMX_LINEAR_MIN_MACS = 1 << 19


class PreparedLinear:
    """An int8 linear with its per-channel int32 parameters converted once (per call they
    were most of its time), so a call is one native call: `PreparedLinear(...)(x, zp)`.

    Made on the amx ISA (and amx=True), where the AMX planes kernel takes the weights (K a
    multiple of 64, N of 32), a uint8 x of AMX_LINEAR_MIN_ROWS rows and AMX_LINEAR_MIN_MACS
    multiply-adds or more runs there instead: x (M, K) is, as it lies, the channels-last
    (1, K, M, 1) input of a 1x1 convolution, whose channels-last (1, N, M, 1) result is (M, N)
    as it lies (the same bits). That convolution is prepared on the first call it takes (2.7
    ms for 512 x 4608 weights); `linear`, one call, keeps the VNNI GEMM (amx=False)."""

    def __init__(self, packed, bias, multiplier, shift, out_zero_point, relu, dtype, amx=True):
        self.packed = packed
        self._args = (bias, multiplier, shift, out_zero_point, relu, dtype)
        self._tail = (*_params(packed.shape[0], bias, multiplier, shift), int(out_zero_point),
                      bool(relu), _signed(dtype))
        n, k = packed.shape if len(packed.shape) == 2 else (0, 0)
        self._amx = amx and _C.current_isa() == "amx" and n % 32 == 0 and k % 64 == 0 and n > 0
        self._conv = None

    def takes_amx(self, x):
        """Whether x (M, K) runs on the AMX tiles."""
        m, (n, k) = x.shape[0], self.packed.shape
        return (self._amx and x.dtype == np.uint8 and m >= AMX_LINEAR_MIN_ROWS and
                m * n * k >= AMX_LINEAR_MIN_MACS)

    def __call__(self, x, x_zero_point):
        """x u8/s8 (M, K) C-contiguous -> (M, N)."""
        p = self.packed
        _check_linear("linear", x, p)
        if self.takes_amx(x):
            if self._conv is None:
                self._conv = PreparedConv(p.as_conv, *self._args)
            (m, k), n = x.shape, p.shape[0]
            y = self._conv(x.reshape(1, m, 1, k).transpose(0, 3, 1, 2), x_zero_point)
            return y.transpose(0, 2, 3, 1).reshape(m, n)
        return _C.int8_linear(x, int(x_zero_point), p.packed, p.row_sums, p.shape[0],
                              *self._tail)


def linear(x, x_zero_point, packed, bias, multiplier, shift, out_zero_point, relu, dtype):
    """x u8/s8 (M, K), packed W (N, K) -> dtype (M, N); requant per output channel. One call:
    the GEMM of the ISA's VNNI (or narrower) kernel; a `PreparedLinear`, kept, also runs on
    AMX tiles."""
    prepared = PreparedLinear(packed, bias, multiplier, shift, out_zero_point, relu, dtype,
                              amx=False)
    return prepared(_input(x), x_zero_point)


CONV_ALGORITHMS = ("auto", "packed", "direct", "amx", "packed_amx")


class PreparedConv:
    """An int8 conv with everything but the input fixed once (int32 parameters, geometry),
    so a call is one native call: `PreparedConv(...)(x, x_zero_point)`.

    out_max: an extra upper clamp (ReLU6: zp + round(6 / s_out)), applied in the kernel.
    algorithm: "auto" (a rule on the shape, AMX tiles where the OS grants them),
    "packed" (activations gathered per block of positions), "direct" (read in place from a
    channel-quad copy of the input; needs C/groups divisible by 4; layouts in
    framework/csrc/int8_cgemm/int8_cgemm.h), "amx" (framework/csrc/int8_amx/int8_amx.h; groups 1, C a multiple
    of 64, OC of 32; on emulated tiles where the OS grants none, a slow path for tests; for
    `channels_last` from an NCHW image of few channels, the stem, its rows form:
    framework/csrc/int8_amx/int8_rows_amx.cpp) or
    "packed_amx" (the packed algorithm's blocks on AMX tiles, int8_amx.h: groups 1,
    AVX-512; emulated tiles likewise).
    Depthwise convolutions have their own kernel and ignore it.
    """

    def __init__(self, packed, bias, multiplier, shift, out_zero_point, relu, dtype, stride=1,
                 padding=0, dilation=1, out_max=None, algorithm="auto"):
        if len(packed.shape) != 4:
            raise ValueError(f"conv2d: weights must be packed from (OC, C/groups, kh, kw), "
                             f"got {packed.shape}")
        if algorithm not in CONV_ALGORITHMS:
            raise ValueError(f"conv2d: unknown algorithm {algorithm!r}; expected one of "
                             f"{', '.join(CONV_ALGORITHMS)}")
        self._args = (packed, bias, multiplier, shift, out_zero_point, relu, dtype, stride,
                      padding, dilation, out_max, algorithm)
        b, m, s = _params(packed.shape[0], bias, multiplier, shift)
        top = qrange(dtype)[1] if out_max is None else int(out_max)
        tail = (b, m, s, int(out_zero_point), bool(relu), _signed(dtype), top, _pair(stride),
                _quad(padding), _pair(dilation))
        self.packed, self.out_channels = packed, packed.shape[0]
        # the channels-last engine's weights, where it takes the conv (groups 1) and runs (its
        # VNNI tile, or the generic ISA's): not packed on the other ISAs, which never run it
        self.nhwc = packed.groups == 1 and (_C.int8_nhwc_fast() or
                                            _C.current_isa() == "generic")
        if packed.depthwise:
            self.run = _C.Int8Conv(True, packed.raw, None, packed.raw.shape, *tail, 1)
        else:
            # the automatic choice takes AMX for NCHW kernels of more than one tap (amx_wins in
            # framework/csrc/int8_amx/int8_amx.h) and for every channels-last conv that it takes
            amx = packed.amx if algorithm == "amx" or (
                algorithm == "auto" and _C.current_isa() == "amx") else None
            self.run = _C.Int8Conv(False, packed.packed, packed.row_sums, packed.shape, *tail,
                                   packed.groups, CONV_ALGORITHMS.index(algorithm), amx,
                                   packed.narrow if _C.int8_narrow_tile() else None,
                                   packed.nhwc if self.nhwc else None)

    def __call__(self, x, x_zero_point):
        """x u8/s8 (N, C, H, W) -> (N, OC, OH, OW). C-contiguous: `run` (the native
        `_C.Int8Conv`, which checks x against the weights) without the int(). Channels-last
        (`is_channels_last`) gives a channels-last result, from the channels-last engine
        (framework/csrc/int8_conv/int8_conv_nhwc.h) where it runs: uint8 x, groups 1, on VNNI and AMX
        hosts (and the generic ISA); else through a C-contiguous copy."""
        if x.flags.c_contiguous:
            return self.run(x, int(x_zero_point))
        if not is_channels_last(x):
            return self.run(np.ascontiguousarray(x), int(x_zero_point))
        return self.channels_last(x, x_zero_point)

    def channels_last(self, x, x_zero_point):
        """x u8/s8 (N, C, H, W), any layout -> (N, OC, OH, OW) channels-last: the channels-last
        engine where it runs (uint8 x, groups 1, on VNNI and AMX hosts and the generic ISA),
        reading x as it lies if channels-last, else copying it channels-last padded with the zero
        point (cheap with VBMI, and the stem then runs without border tiles); elsewhere
        (or made on an ISA without the engine) the NCHW algorithms and a copy of their result."""
        zp = int(x_zero_point)
        if self.nhwc and x.dtype == np.uint8 and (
                _C.int8_nhwc_fast() or _C.current_isa() == "generic"):
            if not is_channels_last(x):
                x = np.ascontiguousarray(x)   # copied, padded, by the engine
            return self.run.channels_last(x, zp).transpose(0, 3, 1, 2)
        return to_channels_last(self.run(np.ascontiguousarray(x), zp))

    def __reduce__(self):
        # copies and pickles (of a model that has run) make the native object anew
        return (PreparedConv, self._args)


def conv2d(x, x_zero_point, packed, bias, multiplier, shift, out_zero_point, relu, dtype,
           stride=1, padding=0, dilation=1, out_max=None, algorithm="auto"):
    """x u8/s8 (N, C, H, W), packed W (OC, C/groups, kh, kw) -> dtype (N, OC, OH, OW).

    Padding is the activation zero point. Convolutions run as a channels x positions GEMM
    whose store requantizes straight into NCHW; depthwise runs direct loops. A channels-last x
    (`is_channels_last`) gives a channels-last result (`PreparedConv.__call__`). out_max: an
    extra upper clamp (ReLU6), as np.minimum after the reference would. algorithm: as in
    `PreparedConv`.
    """
    conv = PreparedConv(packed, bias, multiplier, shift, out_zero_point, relu, dtype, stride,
                        padding, dilation, out_max, algorithm)
    x = np.asarray(x)
    return conv(x if is_channels_last(x) else _input(x), x_zero_point)


class PreparedDeconv:
    """An int8 transposed conv (framework/csrc/int8_deconv/) with everything but the input
    fixed once: `PreparedDeconv(packed, ...)(x, x_zero_point)`; `packed` a PackedDeconvWeight.
    padding: (ph, pw) cropped on both sides, or (top, bottom, left, right); out_max: an
    extra upper clamp (ReLU6)."""

    def __init__(self, packed, bias, multiplier, shift, out_zero_point, relu, dtype, stride=1,
                 padding=0, output_padding=0, dilation=1, out_max=None):
        if not isinstance(packed, PackedDeconvWeight):
            raise ValueError("conv_transpose2d: weights must be a PackedDeconvWeight "
                             f"(pack_deconv_weights), got {type(packed).__name__}")
        self._args = (packed, bias, multiplier, shift, out_zero_point, relu, dtype, stride,
                      padding, output_padding, dilation, out_max)
        b, m, s = _params(packed.out_channels, bias, multiplier, shift)
        top = qrange(dtype)[1] if out_max is None else int(out_max)
        self.run = _C.Int8Deconv(packed.packed, packed.row_sums, packed.shape, packed.groups,
                                 _pair(stride), _quad(padding), _pair(output_padding),
                                 _pair(dilation), b, m, s, int(out_zero_point), bool(relu),
                                 _signed(dtype), top)

    def __call__(self, x, x_zero_point):
        """x u8/s8 (N, C, H, W) -> (N, OC, OH, OW) NCHW (a channels-last x is copied)."""
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        return self.run(x, int(x_zero_point))

    def __reduce__(self):
        return (PreparedDeconv, self._args)


def conv_transpose2d(x, x_zero_point, packed, bias, multiplier, shift, out_zero_point, relu,
                     dtype, stride=1, padding=0, output_padding=0, dilation=1, out_max=None):
    """x u8/s8 (N, C, H, W), packed W (C, OC/groups, kh, kw) -> dtype (N, OC, OH, OW), as
    reference.qconv_transpose2d (then np.minimum with out_max)."""
    deconv = PreparedDeconv(packed, bias, multiplier, shift, out_zero_point, relu, dtype,
                            stride, padding, output_padding, dilation, out_max)
    return deconv(_input(x), x_zero_point)


def quantize(x, scale, zero_point, dtype):
    """float x (...) -> dtype (...) per tensor, exactly reference.quantize (native, parallel)."""
    return _C.int8_quantize(np.asarray(x, np.float32), float(np.float32(scale)),
                            int(zero_point), _signed(dtype))


class PreparedAdd:
    """An int8 add with its zero points, multipliers, shift and output fixed once, so a call
    is one native call: `PreparedAdd(...)(a, b)` (the residual adds of the zoo models: their
    arguments' conversions had taken half of a module call)."""

    def __init__(self, a_zero_point, b_zero_point, m_a, m_b, shift, out_zero_point, relu,
                 dtype):
        self._za, self._zb = int(a_zero_point), int(b_zero_point)
        self._tail = (int(m_a), int(m_b), int(shift), int(out_zero_point), bool(relu),
                      _signed(dtype))

    def __call__(self, a, b):
        """a, b u8/s8 arrays of one shape; channels-last (4-D, either of them: the other is
        made so) gives a channels-last result."""
        if a.shape != b.shape:
            raise ValueError(f"add: shapes differ, a {a.shape} b {b.shape}")
        if not (a.flags.c_contiguous and b.flags.c_contiguous) and (
                is_channels_last(a) or is_channels_last(b)):
            a, b = (v if is_channels_last(v) else to_channels_last(v) for v in (a, b))
            out = _C.int8_add(as_nhwc(a), self._za, as_nhwc(b), self._zb, *self._tail)
            return out.transpose(0, 3, 1, 2)
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        if not b.flags.c_contiguous:
            b = np.ascontiguousarray(b)
        return _C.int8_add(a, self._za, b, self._zb, *self._tail)


def add(a, a_zero_point, b, b_zero_point, m_a, m_b, shift, out_zero_point, relu, dtype):
    """a, b (...) same shape -> dtype (...); (m_a, m_b, shift) from reference.add_multipliers.
    Channels-last in, channels-last out, as `PreparedAdd` (not C-contiguous copies of both:
    bench/RESULTS.md, other int8 ops)."""
    prepared = PreparedAdd(a_zero_point, b_zero_point, m_a, m_b, shift, out_zero_point, relu,
                           dtype)
    a, b = np.asarray(a), np.asarray(b)
    qrange(a.dtype)
    qrange(b.dtype)
    return prepared(a, b)


class PreparedConcat:
    """An int8 concat with the parts' requantization (zero points, multipliers, shifts) and
    the output fixed once, so a call is one native call: `PreparedConcat(...)(xs)`, xs u8/s8
    arrays as `concat` takes them (the argument lists built once, not per call)."""

    def __init__(self, zero_points, multipliers, shifts, out_zero_point, dtype, axis=1,
                 shuffle=False):
        self._tail = ([int(z) for z in zero_points], [int(m) for m in multipliers],
                      [int(s) for s in shifts], int(out_zero_point), _signed(dtype), int(axis),
                      bool(shuffle))

    def __call__(self, xs):
        return _C.int8_concat(xs, *self._tail)


def concat(xs, zero_points, multipliers, shifts, out_zero_point, dtype, axis=1, shuffle=False):
    """Each x_i requantized to the output's (scale, zero point) and joined along axis, in one
    native call. A part that is a channel slice (N, k, H, W) of a C-contiguous tensor
    (ShuffleNetV2's split) is read in place; other strided parts are copied first.

    shuffle: the parts (N, k, H, W), of one shape, interleaved along axis 1 instead
    (output channel j * len(xs) + i is x_i's channel j: channel_shuffle after the concat),
    each written straight into its places.
    """
    prepared = PreparedConcat(zero_points, multipliers, shifts, out_zero_point, dtype, axis,
                              shuffle)
    return prepared([np.asarray(x) for x in xs])


def max_pool2d(x, kernel, stride=None, padding=0):
    """x u8/s8 (N, C, H, W) -> (N, C, OH, OW), same quantization; channels-last in,
    channels-last out."""
    stride = kernel if stride is None else stride
    x = np.asarray(x)
    if not x.flags.c_contiguous and is_channels_last(x):
        return _C.int8_max_pool2d_nhwc(as_nhwc(x), _pair(kernel), _pair(stride),
                                       _quad(padding)).transpose(0, 3, 1, 2)
    return _C.int8_max_pool2d(_input(x), _pair(kernel), _pair(stride), _quad(padding))


def avg_pool2d(x, zero_point, kernel, stride=None, padding=0, count_include_pad=True):
    """x u8/s8 (N, C, H, W) -> (N, C, OH, OW), same scale and zero point, rounded half up.
    Global pooling of channels-last x sums each image's pixels as they lie (natively)."""
    stride = kernel if stride is None else stride
    x = np.asarray(x)
    if (not x.flags.c_contiguous and is_channels_last(x) and _pair(kernel) == x.shape[2:]
            and _quad(padding) == (0, 0, 0, 0)):
        return _C.int8_avg_pool_global_nhwc(as_nhwc(x), int(zero_point))
    return _C.int8_avg_pool2d(_input(x), int(zero_point), _pair(kernel), _pair(stride),
                              _quad(padding), bool(count_include_pad))
