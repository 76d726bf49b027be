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
        # small maps of a batch: one GEMM with the batch folded into the columns beat the
        # per-image batched matmul 1.4-1.8x (1x1 convs at 7x7, batch 16); on big maps the
        # columns' transpose costs more (56x56: 1.6x slower)
        return "im2col_gemm"
    return min(names, key=_RULE_ORDER.index)


def gemm_direct_wins(x, w, geo, adjoint=False):
    """With a SIMD kernel (AVX2 or AVX-512); pointwise: `pointwise_direct_wins`; else always for a
    forward convolution, and for the adjoint one of an input gradient (`adjoint`: its kernel is
    a flipped copy made per call, _C.conv_flip_kernel) where it has few rows (C * kh * kw <=
    GEMM_DIRECT_STEM_DEPTH: the stems) or >= ADJOINT_MIN_POSITIONS output positions per call
    (panels run over the whole batch, so a batch of 7x7 maps fills them). Measured at 2 threads
    on a 2-core AVX-512 Xeon, interleaved in one process (tianyuan imported before numpy, so
    OpenBLAS's workers sleep between calls): ResNet-18's stem 2.9x faster than im2col + OpenBLAS
    at batch 16; 3x3 layers at batch 16, 64 channels at 56x56 to 512 at 7x7 (stride 1 and 2)
    1.15-1.65x faster than im2col; at batch 1, since the kernel reads w once on small maps
    (2026-12-01), 0.5-0.92x im2col's time on every ResNet-18 / ResNet-50 layer from 28x28 down
    (256 channels at 14x14 1.79 -> 1.62 ms, 512 at 7x7 2.12 -> 1.96, strided 3x3 0.72-0.79x,
    strided 1x1 0.46-0.56x). The adjoint at batch 1: 0.74x from 28x28 up, 0.87x at 14x14 (256
    channels), 1.07x at 7x7 (512), where im2col's stays. With the AVX2 kernel (6 x 16
    sub-blocks; a 2-core AMD EPYC Zen 3, 2026-12-03, tianyuan imported first), ResNet-18's
    convolutions other than 1x1 stride 1 took 31.6 ms at batch 1 where the rule without it
    (im2col + OpenBLAS, winograd) took 42.6, and 473 ms at batch 16 where it took 597 (the stem
    75 -> 34 ms, 64 channels at 56x56 40-42 -> 30-41, 512 at 7x7 33-38 -> 26-33); pointwise
    layers: `pointwise_direct_wins`."""
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
    """1x1 convolutions read x in place (no packing): 1.2-1.9x faster than numpy's batched
    matmul at batch 16 on maps of >= 14x14 (ShuffleNetV2, MobileNetV2 shapes) with >= 24
    input channels. At batch 1 (2 threads, interleaved, 2026-12-01): 0.4-0.8x the time for
    every MobileNetV2 and ShuffleNetV2 1x1 layer with >= 16 input channels (0.25-0.5x in the
    fused inference path, where it also applies the folded BN and the activation in its
    store), on par (0.84-1.13x) for ResNet-50's, 0.98-1.09x with >= 2^19 weights, where the
    per-call weight packing told; since w is read once on small maps (the kernel's few-positions
    plan), 0.75-0.9x with >= 2^19 weights at 7x7 and 14x14 (ResNet-50's 2048 -> 512 at 7x7
    0.78 -> 0.58 ms). Batches of maps under POINTWISE_MIN_PLANE (7x7) had stayed on one
    GEMM with the batch folded into the columns; since the kernel's panels run over the whole
    batch and its few-positions plan takes the wide ones (2026-12-01, batch 16, interleaved):
    0.25-0.93x that GEMM's time on every MobileNetV2 / ShuffleNetV2 7x7 layer (232 -> 232
    0.88 -> 0.82 ms, 960 -> 160 2.10 -> 1.47, 58 -> 58 0.19 -> 0.05), 0.4-0.8x at batch 2-4.
    With the AVX2 kernel (Zen 3, 2026-12-03) the same rule; whole fused models at batch 16, 3
    alternating runs against numpy's GEMM for the batched 1x1 layers: ShuffleNetV2 138-215 ->
    77-122 ms, MobileNetV2 310-373 -> 229-348, ResNet-50 1343-1750 -> 1458-1595. Layer by
    layer, in isolation, numpy's GEMM had looked level or faster on MobileNetV2 (93 against
    103 ms); in a model its workers start while ours still spin and share their cores. At
    batch 1: MobileNetV2's 1x1 layers 6.0 -> 5.4 ms, ShuffleNetV2's 4.1 -> 3.5. Batches had
    needed >= 24 input channels, from layers timed alone; MobileNetV2's 16 -> 96 at 112x112 on
    the direct kernel too (2026-12-04, Zen 5, 2 threads, alternating in one process): a fused
    fp32 forward at batch 16 0.88-0.92x the time (two runs), a training step at batch 8
    0.91-0.96x."""
    if depth < POINTWISE_MIN_DEPTH:
        return False
    return batch > 1 or depth * out_channels < POINTWISE_MAX_WEIGHTS_B1 or (
        plane <= POINTWISE_FEW_PLANE)


def wgrad_direct_wins(x, w, groups):
    """Whether the weight gradient runs on the direct kernel (_C.conv2d_gemm_weight_grad, AVX-512 or
    AVX2) rather than im2col + numpy's GEMM, whatever algorithm ran the forward: every float32
    layer of one group on a SIMD ISA. Until 2026-12-04 a rule by positions per call and by
    widening (Co > C * kh * kw) sent small calls and widening 1x1 layers to numpy, from layers
    timed alone, where numpy's GEMM had the cores to itself. In a training step it starts while
    our OpenMP workers still spin from the last kernel: ResNet-50's widening 1x1 layers at batch 8
    spent 74 ms a step there on a 2-core Zen 5. Everything on the direct kernel, training steps
    at 2 threads, alternating in one process: batch 8 ResNet-50 0.92-0.94x the time, MobileNetV2
    0.93x, ShuffleNetV2 1.00x; ResNet-50 batch 16 0.96x, batch 2 0.94x; batch 1 ResNet-18 and
    MobileNetV2 0.96x; AVX2 code there at batch 8 ResNet-18, ResNet-50 and MobileNetV2
    0.95-0.96x; a DCGAN generator's transposed convolutions level (0.97-1.00x)."""
    return (groups == 1 and x.dtype == np.float32 and w.dtype == np.float32
            and _C.current_isa() != "generic")


def columns_on_direct_wins(x, w, groups, geo):
    """Whether an input gradient that no convolution kernel takes (strided layers) computes
    its columns on the direct kernel (conv._columns_input_grad) rather than numpy's GEMM: float32
    groups of one, a SIMD ISA, not pointwise, >= COLUMNS_DIRECT_MIN_POSITIONS output positions
    per call. The whole backward of one strided layer at 2 threads on a 2-core Zen 5
    (2026-12-04, both paths in one process): ResNet-18's stride-2 3x3 layers at batch 8 and 16
    0.35-0.44x the time (64 channels at 56x56, batch 8, 8.1 -> 3.0 ms), their 1x1 shortcuts
    0.48-0.79x; AVX2 code there at batch 8 0.59-0.97x. At batch 1 on 7x7 and 14x14 outputs (49,
    196 positions) the per-call transpose and packing of w lose (1.14-1.24x on AVX-512, up to
    1.55x on AVX2); 784 positions 0.75x (AVX2 0.92-1.03x)."""
    if not wgrad_direct_wins(x, w, groups) or geo.pointwise:  # float32, groups 1, SIMD
        return False
    oh, ow = geo.out_size(*x.shape[2:])
    return x.shape[0] * oh * ow >= COLUMNS_DIRECT_MIN_POSITIONS


def winograd_wins(x, w, geo):
    """Shapes where F(2x2, 3x3) beats the GEMMs: >= WINO_MIN_TILES tiles per call on output
    maps of >= WINO_MIN_SIZE (odd 7x7 maps waste 30% of 2x2 tiles) with >= WINO_MIN_CHANNELS
    channels. Measured at 2 threads on this repo's 2-core AVX-512 Xeon, 3x3 C -> C for C in
    64-512, maps 7-56, batch 1 and 16, interleaved: winograd 1.2-1.9x faster than the best
    other algorithm for 256+ channels on >= 14x14 maps at batch 16 and >= 28x28 at batch 1;
    1.2-1.6x slower at 14x14 batch 1 (49 tiles: the per-call weight transform, 16 Co C
    floats, dominates) and on 7x7 maps (equal at 512 channels, 1.25x slower at 256)."""
    n, c, h, wd = x.shape
    oh, ow = geo.out_size(h, wd)
    tiles = n * ((oh + 1) // 2) * ((ow + 1) // 2)
    return (tiles >= WINO_MIN_TILES and min(oh, ow) >= WINO_MIN_SIZE
            and min(c, w.shape[0]) >= WINO_MIN_CHANNELS)


def winograd_beats_direct(x, w, geo):
    """Where both would win over im2col, winograd takes maps of >= WINO_OVER_DIRECT_SIZE with
    >= WINO_OVER_DIRECT_CHANNELS channels (measured as above, batch 16: 256 channels at 28x28
    1.2x faster than gemm_direct; at 14x14 the two tied, with 128 channels at 28x28 and 64
    at 56x56 gemm_direct was 1.1x and 1.6x faster)."""
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
