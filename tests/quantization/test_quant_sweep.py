"""A seeded random sweep of the int8 kernels against the numpy reference, on every ISA path:
shapes, strides, paddings, dilations, groups, dtypes, zero points, clamps and layouts that
no one wrote down (the chosen cases are in conv_cases.py and the other test files; a sweep
found the direct algorithm's wrong rows for padding wider than the kernel reaches).

Each case is made from (TIANYUAN_SWEEP_SEED, its kind, its index), so a failure reruns
alone, and its parameters are in the failure's message:

    TIANYUAN_SWEEP_SEED=7 pytest tests/quantization/test_quant_sweep.py -k 'conv and 13'

TIANYUAN_SWEEP=N runs N cases of each kind (default 24, a few seconds; a long sweep on a
new machine or after a kernel change: 2000 with a few seeds, under a minute a thousand
convolutions on 2 cores; OMP_NUM_THREADS=1, 3, 4 run the kernels' other work splits)."""
import os

import numpy as np
import pytest
from helpers import check_quant

from tianyuan import _C, available_isas
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R
from tianyuan.quantization.layout import to_channels_last

SWEEP = int(os.environ.get("TIANYUAN_SWEEP", "24"))
SEED = int(os.environ.get("TIANYUAN_SWEEP_SEED", "0"))
KINDS = ("conv", "linear", "add", "concat", "pool", "quantize")


def _rng(kind, index):
    return np.random.default_rng((SEED, KINDS.index(kind), index))


def _dtype(rng):
    return np.int8 if rng.random() < 0.3 else np.uint8


def _q(rng, shape, dtype):
    lo, hi = R.qrange(dtype)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _zp(rng, dtype):
    lo, hi = R.qrange(dtype)
    return int(rng.integers(lo, hi + 1))


def _requant(rng, channels):
    """Bias and per-channel (multiplier, shift): a model's usual range, or (one case in five)
    multipliers from 1e-9 to 30 and biases up to 2**26 (dead or tiny-range layers)."""
    if rng.random() < 0.8:
        bias, real = rng.integers(-5000, 5000, channels), rng.uniform(1e-4, 8e-3, channels)
    else:
        bias, real = rng.integers(-2 ** 26, 2 ** 26, channels), 10 ** rng.uniform(-9, 1.5,
                                                                                    channels)
    return bias.astype(np.int32), R.quantize_multiplier(real)


def _maybe_channels_last(rng, x):
    return to_channels_last(x) if x.ndim == 4 and rng.random() < 0.5 else x


def _kernel_geometry(rng):
    """(kh, kw), stride, dilation and (top, bottom, left, right) padding, up to the kernel's
    reach on each side (wider than 'same' needs included)."""
    if rng.random() < 0.5:
        kernel = (int(rng.choice([1, 3, 5, 7])),) * 2
    else:
        kernel = tuple(int(k) for k in rng.integers(1, 8, 2))
    stride = (int(rng.choice([1, 1, 2])),) * 2 if rng.random() < 0.8 else \
        tuple(int(s) for s in rng.integers(1, 4, 2))
    dilation = (1, 1) if rng.random() < 0.8 else tuple(int(d) for d in rng.integers(1, 4, 2))
    reach = [max(1, (k - 1) * d) for k, d in zip(kernel, dilation)]
    padding = tuple(int(rng.integers(0, reach[i // 2] + 1)) for i in range(4))
    return kernel, stride, dilation, padding


def conv_case(index):
    """A random int8 conv: (x, weights, bias, multiplier, shift, geometry, groups, zero
    points, relu, out dtype, ReLU6-like top or None), from the seed and index."""
    rng = _rng("conv", index)
    (kh, kw), stride, dilation, pad = _kernel_geometry(rng)
    kind = rng.choice(["dense", "grouped", "depthwise"], p=[0.6, 0.15, 0.25])
    if kind == "dense":
        groups, c = 1, int(rng.choice([1, 3, 4, 8, 16, 17, 32, 64, 67, 128]))
        oc = int(rng.integers(1, 100)) if rng.random() < 0.7 else 32 * int(rng.integers(1, 4))
    elif kind == "grouped":
        groups = int(rng.choice([2, 3, 4]))
        c, oc = groups * int(rng.integers(1, 20)), groups * int(rng.integers(1, 10))
    else:
        c = groups = int(rng.integers(1, 70))
        oc = c * int(rng.choice([1, 1, 2]))
    h = int(rng.integers(max(1, (kh - 1) * dilation[0] + 1 - pad[0] - pad[1]), 30))
    w = int(rng.integers(max(1, (kw - 1) * dilation[1] + 1 - pad[2] - pad[3]), 60))
    in_dtype, out_dtype = _dtype(rng), _dtype(rng)
    x = _q(rng, (int(rng.integers(1, 5)), c, h, w), in_dtype)
    wt = _q(rng, (oc, c // groups, kh, kw), np.int8)
    bias, (mult, shift) = _requant(rng, oc)
    out_zp = _zp(rng, out_dtype)
    top = int(rng.integers(out_zp, R.qrange(out_dtype)[1] + 1)) if rng.random() < 0.2 else None
    geom = dict(stride=stride, padding=pad, dilation=dilation)
    return (x, wt, bias, mult, shift, geom, groups, _zp(rng, in_dtype), out_zp,
            bool(rng.random() < 0.5), out_dtype, top, rng.random() < 0.4)


def _describe(x, wt, geom, groups, *rest):
    return (f"x {x.dtype} {x.shape}, w {wt.shape}, {geom}, groups {groups}, "
            f"zero points / relu / out dtype / top {rest}")


def _algorithms(c, oc, groups):
    """Each algorithm that takes the shape, forced (PreparedConv's list); the AMX ones on
    emulated tiles where the OS grants none (AVX-512 with VBMI)."""
    names = ["auto", "packed"]
    if (c // groups) % 4 == 0 and groups != c:
        names.append("direct")
    if groups == 1 and "avx512" in available_isas() and _C.cpu_features()["avx512_vbmi"]:
        names += ["packed_amx"] + (["amx"] if c % 64 == 0 and oc % 32 == 0 else [])
    return names


@pytest.mark.parametrize("index", range(SWEEP))
def test_conv_sweep(index):
    (x, wt, bias, mult, shift, geom, groups, in_zp, out_zp, relu, out_dtype, top,
     channels_last) = conv_case(index)
    what = _describe(x, wt, geom, groups, in_zp, out_zp, relu, out_dtype.__name__, top)
    want = R.qconv2d(x, in_zp, wt, bias, mult, shift, out_zp, relu, out_dtype, groups=groups,
                     **geom)
    if top is not None:
        want = np.minimum(want, top).astype(out_dtype)
    packed = K.pack_weights(wt, groups)
    inputs = [x, to_channels_last(x)] if channels_last else [x]
    for algorithm in _algorithms(x.shape[1], wt.shape[0], groups):
        conv = K.PreparedConv(packed, bias, mult, shift, out_zp, relu, out_dtype, out_max=top,
                              algorithm=algorithm, **geom)
        for xi in inputs:
            layout = "NCHW" if xi.flags.c_contiguous else "channels-last"
            check_quant(lambda: conv(xi, in_zp), lambda: want,
                        what=f"{algorithm}, {layout} input: {what}")


@pytest.mark.parametrize("index", range(SWEEP))
def test_linear_sweep(index):
    rng = _rng("linear", index)
    m, k, n = (int(v) for v in rng.integers(1, (70, 300, 150)))
    in_dtype, out_dtype = _dtype(rng), _dtype(rng)
    x, w = _q(rng, (m, k), in_dtype), _q(rng, (n, k), np.int8)
    bias, (mult, shift) = _requant(rng, n)
    args = (bias, mult, shift, _zp(rng, out_dtype), bool(rng.random() < 0.5), out_dtype)
    zp, packed = _zp(rng, in_dtype), K.pack_weights(w)
    what = f"x {x.dtype} {x.shape} (zero point {zp}), w {w.shape}, {args[3:]}"
    check_quant(lambda: K.linear(x, zp, packed, *args), lambda: R.linear(x, zp, w, *args),
                what=what)
    check_quant(lambda: K.gemm(x, zp, packed), lambda: R.gemm(x, zp, w), what=what)


def _shape4(rng):
    return tuple(int(v) for v in rng.integers(1, (4, 70, 20, 20)))


@pytest.mark.parametrize("index", range(SWEEP))
def test_add_sweep(index):
    rng = _rng("add", index)
    shape = _shape4(rng) if rng.random() < 0.7 else \
        tuple(int(v) for v in rng.integers(1, 40, int(rng.integers(1, 4))))
    in_dtype, out_dtype = _dtype(rng), _dtype(rng)
    a, b = _q(rng, shape, in_dtype), _q(rng, shape, in_dtype)
    ma, mb, shift = R.add_multipliers(*rng.uniform(0.01, 0.5, 3))
    tail = (ma, mb, shift, _zp(rng, out_dtype), bool(rng.random() < 0.5), out_dtype)
    za, zb = _zp(rng, in_dtype), _zp(rng, in_dtype)
    add = K.PreparedAdd(za, zb, *tail)
    ia, ib = _maybe_channels_last(rng, a), _maybe_channels_last(rng, b)
    check_quant(lambda: add(ia, ib), lambda: R.add(a, za, b, zb, *tail),
                what=f"{a.dtype} {shape}, zero points {za} {zb}, {tail}, "
                     f"contiguous {ia.flags.c_contiguous} {ib.flags.c_contiguous}")


def _concat_parts(rng, shuffle):
    n, h, w = (int(v) for v in rng.integers(1, (4, 12, 12)))
    count = int(rng.integers(1, 5))
    channels = [int(rng.integers(1, 40))] * count if shuffle else \
        [int(c) for c in rng.integers(1, 40, count)]
    dtype = _dtype(rng)
    return [_q(rng, (n, c, h, w), dtype) for c in channels], dtype


@pytest.mark.parametrize("index", range(SWEEP))
def test_concat_sweep(index):
    rng = _rng("concat", index)
    shuffle = bool(rng.random() < 0.3)
    xs, in_dtype = _concat_parts(rng, shuffle)
    zps = [_zp(rng, in_dtype) for _ in xs]
    mults, shifts = zip(*[(int(m[0]), int(s[0])) for m, s in
                          (R.quantize_multiplier(rng.uniform(0.3, 2.0, 1)) for _ in xs)])
    out_dtype = _dtype(rng)
    tail = (mults, shifts, _zp(rng, out_dtype), out_dtype)
    want = R.concat(xs, zps, *tail)
    if shuffle:
        n, _, h, w = want.shape
        want = want.reshape(n, len(xs), -1, h, w).transpose(0, 2, 1, 3, 4).reshape(n, -1, h, w)
    parts = list(xs)
    if not shuffle and rng.random() < 0.4:   # a channel slice of a bigger tensor, read in place
        whole = _q(rng, (xs[0].shape[0], xs[0].shape[1] + 3) + xs[0].shape[2:], in_dtype)
        whole[:, 1:-2] = xs[0]
        parts[0] = whole[:, 1:-2]
    check_quant(lambda: K.concat(parts, zps, *tail, axis=1, shuffle=shuffle), lambda: want,
                what=f"{[x.shape for x in xs]}, zero points {zps}, {tail}, shuffle {shuffle}, "
                     f"first part strided {not parts[0].flags.c_contiguous}")


@pytest.mark.parametrize("index", range(SWEEP))
def test_pool_sweep(index):
    rng = _rng("pool", index)
    n, c, h, w = _shape4(rng)
    dtype = _dtype(rng)
    kernel = (int(rng.integers(1, min(h, 5) + 1)), int(rng.integers(1, min(w, 5) + 1)))
    stride = tuple(int(s) for s in rng.integers(1, 4, 2))
    pad = tuple(int(rng.integers(0, kernel[i // 2] // 2 + 1)) for i in range(4))
    x, zp, count_pad = _q(rng, (n, c, h, w), dtype), _zp(rng, dtype), bool(rng.random() < 0.5)
    xi = _maybe_channels_last(rng, x)
    what = (f"x {x.dtype} {x.shape} contiguous {xi.flags.c_contiguous}, kernel {kernel}, "
            f"stride {stride}, padding {pad}, zero point {zp}, count_include_pad {count_pad}")
    check_quant(lambda: K.max_pool2d(xi, kernel, stride, pad),
                lambda: R.max_pool2d(x, kernel, stride, pad), what=what)
    check_quant(lambda: K.avg_pool2d(xi, zp, kernel, stride, pad, count_pad),
                lambda: R.avg_pool2d(x, zp, kernel, stride, pad, count_pad), what=what)
    check_quant(lambda: K.avg_pool2d(xi, zp, (h, w)), lambda: R.avg_pool2d(x, zp, (h, w)),
                what="global " + what)


@pytest.mark.parametrize("index", range(SWEEP))
def test_quantize_sweep(index):
    rng = _rng("quantize", index)
    shape = tuple(int(v) for v in rng.integers(1, 50, int(rng.integers(1, 5))))
    x = (rng.standard_normal(shape) * rng.uniform(0.1, 10)).astype(np.float32)
    dtype = _dtype(rng)
    scale, zp = float(np.float32(rng.uniform(0.001, 0.2))), _zp(rng, dtype)
    check_quant(lambda: K.quantize(x, scale, zp, dtype),
                lambda: R.quantize(x, scale, zp, dtype),
                what=f"{shape}, scale {scale}, zero point {zp}, {dtype.__name__}")
