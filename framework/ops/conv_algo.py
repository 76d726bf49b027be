"""Convolution algorithm choice, made once per shape and cached (MegEngine's fast-run idea).

Algorithms (name: when it applies):
    gemm_1x1          1x1 kernel, stride 1, no padding: the input already is the column matrix
    depthwise_direct  groups == C == Co: direct SIMD kernel, framework/csrc/depthwise/depthwise.cpp
    winograd_f2x2     3x3, stride 1, dilation 1, groups 1, padding <= 2: ops/winograd.py
    gemm_direct       groups 1, float32: our GEMM with panels packed from the image, no
                      im2col matrix, bias in the store (framework/csrc/conv/conv_gemm.cpp)
    im2col_gemm       anything: native im2col + numpy batched matmul
Where one shape admits several algorithms and none is forced, the default is a fixed rule
by shape (`rule`: gemm_direct where `gemm_direct_wins`, winograd_f2x2 where `winograd_wins`,
where both do `winograd_beats_direct` decides; im2col_gemm for 1x1 convolutions of a batch
of small maps, else the first applicable of depthwise_direct, gemm_1x1, im2col_gemm), so a
run is reproducible bit for bit — a resumed training run must compute what the
uninterrupted one did. With fast-run on (`set_fastrun(True)` or env
TIANYUAN_CONV_FASTRUN=1), `choose` instead times each candidate once on the real arrays and
keeps the fastest for that shape; results may then differ in the last bits between
processes. `algorithm_choices()` lists what was chosen (for a model: run it once, then read
the list).

The weight gradient has its own fixed choice, `wgrad_direct_wins`: our direct kernel
(_C.conv2d_gemm_weight_grad) or im2col + numpy's GEMM, whatever ran the forward; so has a
strided layer's input gradient, `columns_on_direct_wins`.

Force one for tests or experiments with env TIANYUAN_CONV_ALGO=name or
`with force_algorithm("im2col_gemm"): ...`; a forced algorithm that cannot run a shape falls
back to the automatic choice.
"""
import contextlib
import os
import time

import numpy as np

from .. import _C
from . import winograd

ALGORITHMS = ("gemm_1x1", "depthwise_direct", "winograd_f2x2", "gemm_direct", "im2col_gemm")

_cache = {}     # shape key -> algorithm name
_forced = [None]
_fastrun = [os.environ.get("TIANYUAN_CONV_FASTRUN", "0") not in ("", "0")]
# The fixed rule's preference; winograd_f2x2 is taken first where winograd_wins says so.
_RULE_ORDER = ("depthwise_direct", "gemm_1x1", "im2col_gemm", "winograd_f2x2", "gemm_direct")
WINO_MIN_TILES = 128
WINO_MIN_SIZE = 14
GEMM_DIRECT_STEM_DEPTH = 160
ADJOINT_MIN_POSITIONS = 196
COLUMNS_DIRECT_MIN_POSITIONS = 392
WINO_OVER_DIRECT_CHANNELS = 256
WINO_OVER_DIRECT_SIZE = 28
POINTWISE_MIN_PLANE = 196  # below: the batch's columns in one GEMM, without AVX-512
POINTWISE_MIN_DEPTH = 16
POINTWISE_MAX_WEIGHTS_B1 = 1 << 19
POINTWISE_FEW_PLANE = 196
WINO_MIN_CHANNELS = 16


def set_fastrun(enabled):
    """Time candidate algorithms per shape (True) or use the fixed, reproducible rule."""
    _fastrun[0] = bool(enabled)
    _cache.clear()


def applicable(x, w, groups, geo):
    """Algorithms that can run this convolution, preferred first."""
    c, co = x.shape[1], w.shape[0]
    names = []
    if groups == c == co and x.dtype.kind == "f":
        names.append("depthwise_direct")
    if geo.pointwise:
        names.append("gemm_1x1")
    if winograd.applies(w, groups, geo):
        names.append("winograd_f2x2")
    if groups == 1 and x.dtype == np.float32 and w.dtype == np.float32:
        names.append("gemm_direct")
    names.append("im2col_gemm")
    return names


def _key(x, w, groups, geo):
    return (x.shape, w.shape, x.dtype.char, groups, geo.stride, geo.padding, geo.dilation)


def rule(x, w, groups, geo, names):
    """The fixed, reproducible choice among the applicable `names`: the first in _RULE_ORDER,
    except that gemm_direct and winograd_f2x2 win where they measured faster (*_wins)."""
    direct = "gemm_direct" in names and gemm_direct_wins(x, w, geo)
    if "winograd_f2x2" in names and winograd_wins(x, w, geo) and (
            not direct or winograd_beats_direct(x, w, geo)):
        return "winograd_f2x2"
    if direct:
        return "gemm_direct"
    oh, ow = geo.out_size(*x.shape[2:])
    if geo.pointwise and x.shape[0] > 1 and oh * ow < POINTWISE_MIN_PLANE:
        # small maps of a batch: one GEMM with the batch folded into the columns beats the
        # per-image batched matmul; on big maps the columns' transpose costs more
        # (bench/RESULTS.md, fp32 kernels: the algorithm rule)
        return "im2col_gemm"
    return min(names, key=_RULE_ORDER.index)


def gemm_direct_wins(x, w, geo, adjoint=False):
    """With a SIMD kernel (AVX2 or AVX-512); pointwise: `pointwise_direct_wins`; else always for a
    forward convolution, and for the adjoint one of an input gradient (`adjoint`: its kernel is
    a flipped copy made per call, _C.conv_flip_kernel) where it has few rows (C * kh * kw <=
    GEMM_DIRECT_STEM_DEPTH: the stems) or >= ADJOINT_MIN_POSITIONS output positions per call
    (panels run over the whole batch, so a batch of 7x7 maps fills them); at batch 1 on 7x7
    maps the adjoint keeps im2col's. The measurements (AVX-512 and AVX2, batch 1 and 16):
    bench/RESULTS.md, fp32 kernels: the algorithm rule; pointwise layers:
    `pointwise_direct_wins`."""
    isa = _C.current_isa()
    if isa not in ("avx2", "avxvnni", "avx512", "vnni", "amx"):
        return False
    depth = w.shape[1] * w.shape[2] * w.shape[3]
    oh, ow = geo.out_size(*x.shape[2:])
    if geo.pointwise:
        return pointwise_direct_wins(x.shape[0], oh * ow, depth, w.shape[0])
    return (not adjoint or depth <= GEMM_DIRECT_STEM_DEPTH
            or x.shape[0] * oh * ow >= ADJOINT_MIN_POSITIONS)


def pointwise_direct_wins(batch, plane, depth, out_channels):
    """1x1 convolutions read x in place (no packing), from POINTWISE_MIN_DEPTH input
    channels: at batch 1 with fewer than POINTWISE_MAX_WEIGHTS_B1 weights, or on maps of up to
    POINTWISE_FEW_PLANE positions (the kernel's few-positions plan reads w once); every batch
    of more than one image, small maps too (the kernel's panels run over the whole batch).
    Layers timed alone had favoured numpy's GEMM; in a model its workers start while ours
    still spin and share their cores, so the rule comes from whole models (bench/RESULTS.md,
    fp32 kernels: the algorithm rule, and training)."""
    if depth < POINTWISE_MIN_DEPTH:
        return False
    return batch > 1 or depth * out_channels < POINTWISE_MAX_WEIGHTS_B1 or (
        plane <= POINTWISE_FEW_PLANE)


def wgrad_direct_wins(x, w, groups):
    """Whether the weight gradient runs on the direct kernel (_C.conv2d_gemm_weight_grad, AVX-512 or
    AVX2) rather than im2col + numpy's GEMM, whatever algorithm ran the forward: every float32
    layer of one group on a SIMD ISA. A rule by positions per call and by widening had sent
    small calls and widening 1x1 layers to numpy, from layers timed alone, where numpy's GEMM
    had the cores to itself; in a training step it starts while our OpenMP workers still spin
    from the last kernel (bench/RESULTS.md, training: numpy's GEMM out of the backward)."""
    return (groups == 1 and x.dtype == np.float32 and w.dtype == np.float32
            and _C.current_isa() != "generic")


def columns_on_direct_wins(x, w, groups, geo):
    """Whether an input gradient that no convolution kernel takes (strided layers) computes
    its columns on the direct kernel (conv._columns_input_grad) rather than numpy's GEMM: float32
    groups of one, a SIMD ISA, not pointwise, >= COLUMNS_DIRECT_MIN_POSITIONS output positions
    per call: below it (7x7 and 14x14 outputs at batch 1) the per-call transpose and packing of
    w lose (bench/RESULTS.md, training: numpy's GEMM out of the backward)."""
    if not wgrad_direct_wins(x, w, groups) or geo.pointwise:  # float32, groups 1, SIMD
        return False
    oh, ow = geo.out_size(*x.shape[2:])
    return x.shape[0] * oh * ow >= COLUMNS_DIRECT_MIN_POSITIONS


def winograd_wins(x, w, geo):
    """Shapes where F(2x2, 3x3) beats the GEMMs: >= WINO_MIN_TILES tiles per call on output
    maps of >= WINO_MIN_SIZE (odd 7x7 maps waste 30% of 2x2 tiles) with >= WINO_MIN_CHANNELS
    channels: 256+ channels on >= 14x14 maps at batch 16 and >= 28x28 at batch 1; at 14x14
    batch 1 the per-call weight transform (16 Co C floats) dominates, and 7x7 maps lose
    (bench/RESULTS.md, fp32 kernels: the algorithm rule)."""
    n, c, h, wd = x.shape
    oh, ow = geo.out_size(h, wd)
    tiles = n * ((oh + 1) // 2) * ((ow + 1) // 2)
    return (tiles >= WINO_MIN_TILES and min(oh, ow) >= WINO_MIN_SIZE
            and min(c, w.shape[0]) >= WINO_MIN_CHANNELS)


def winograd_beats_direct(x, w, geo):
    """Where both would win over im2col, winograd takes maps of >= WINO_OVER_DIRECT_SIZE with
    >= WINO_OVER_DIRECT_CHANNELS channels (bench/RESULTS.md, fp32 kernels: the algorithm
    rule)."""
    oh, ow = geo.out_size(*x.shape[2:])
    return (min(oh, ow) >= WINO_OVER_DIRECT_SIZE
            and min(x.shape[1], w.shape[0]) >= WINO_OVER_DIRECT_CHANNELS)


def forced():
    return _forced[0] or os.environ.get("TIANYUAN_CONV_ALGO") or None


def choose(x, w, groups, geo, run=None):
    """Name of the algorithm for this convolution. `run(name)` executes one candidate; given,
    several candidates are timed once and the fastest is cached for the shape."""
    name = forced()
    if name is not None:
        if name not in ALGORITHMS:
            raise ValueError(f"conv2d: unknown algorithm {name!r} (TIANYUAN_CONV_ALGO or "
                             f"force_algorithm); expected one of {', '.join(ALGORITHMS)}")
        if name in applicable(x, w, groups, geo):
            return name
    key = _key(x, w, groups, geo)
    algo = _cache.get(key)  # the hit is the common case: a few microseconds per call matter
    if algo is None:
        names = applicable(x, w, groups, geo)
        if _fastrun[0] and run is not None and len(names) > 1:
            algo = _fastest(names, run)
        else:
            algo = rule(x, w, groups, geo, names)
        _cache[key] = algo
    return algo


def _fastest(names, run):
    times = {}
    for name in names:
        start = time.perf_counter()
        run(name)
        times[name] = time.perf_counter() - start
    return min(times, key=times.get)


def algorithm_choices():
    """{(x shape, w shape, dtype char, groups, stride, padding, dilation): algorithm} so far."""
    return dict(_cache)


def clear_choices():
    _cache.clear()


@contextlib.contextmanager
def force_algorithm(name):
    """Run every applicable convolution with `name` inside the block (None: automatic)."""
    if name is not None and name not in ALGORITHMS:
        raise ValueError(f"force_algorithm: unknown algorithm {name!r}; expected one of "
                         f"{', '.join(ALGORITHMS)}")
    previous, _forced[0] = _forced[0], name
    try:
        yield
    finally:
        _forced[0] = previous
