"""The int8 convolution shapes and their random data, shared by the conv tests."""
import numpy as np
import pytest

from tianyuan import _C, available_isas
from tianyuan.quantization import reference as R

# the AMX algorithms' store (and their emulated tiles) needs AVX-512 with VBMI
needs_avx512 = pytest.mark.skipif(
    "avx512" not in available_isas() or not _C.cpu_features()["avx512_vbmi"],
    reason="the amx algorithm's store needs AVX-512 with VBMI")

# (N, C, H, W, OC, kh, kw, stride, padding, dilation, groups)
# Depthwise with 16 channels or more, which AVX2 runs with the channels in the lanes, blocks
# of 16 (int8_depthwise_lanes_avx2.cpp) where there are as many (image, block) pairs as
# threads: a part-filled last block, stride 2, 5x5 (no fixed pair count), dilation with
# asymmetric padding, a map of fewer than 32 positions, one of 33 (the input's 32-position
# transposes and the output's, each with a tail), 1x1 with stride 3. VNNI's twin
# (int8_depthwise_lanes_vnni.cpp) runs those of up to 7x7 outputs (14x14 at stride 2) and
# column dilation 1, and these: 5x5 (two tap words a row), a 3x6 kernel with row dilation
# (the general row loop, taps 6 and 7 zero), column stride 2 with row stride 1.
LANES_CASES = [
    (2, 20, 7, 7, 20, 3, 3, 1, 1, 1, 20),
    (1, 37, 14, 13, 37, 3, 3, 2, 1, 1, 37),
    (2, 16, 9, 11, 16, 5, 5, 1, 2, 1, 16),
    (2, 18, 10, 9, 18, 3, 3, 1, (2, 1, 0, 2), (2, 1), 18),
    (3, 16, 5, 6, 16, 3, 3, 1, 1, 1, 16),
    (2, 17, 3, 11, 17, 1, 1, 1, 0, 1, 17),
    (2, 32, 8, 8, 32, 1, 1, 3, 0, 1, 32),
    (2, 16, 7, 7, 16, 5, 5, 1, 2, 1, 16),
    (1, 35, 9, 8, 35, 3, 6, 2, (1, 1, 2, 3), (2, 1), 35),
    (2, 16, 6, 9, 16, 3, 3, (1, 2), 1, 1, 16),
]
CASES = [
    (1, 3, 5, 5, 4, 1, 1, 1, 0, 1, 1),            # 1x1: straight to the GEMM
    (2, 17, 6, 7, 33, 1, 1, 1, 0, 1, 1),
    (1, 5, 7, 6, 3, 1, 1, 2, 0, 1, 1),            # 1x1 strided: im2row
    (2, 3, 9, 8, 17, 3, 3, 1, 1, 1, 1),
    (1, 7, 11, 10, 20, 3, 3, 2, 1, 1, 1),
    (1, 4, 10, 9, 5, 5, 3, (2, 1), (2, 1), 1, 1),
    (1, 6, 9, 9, 6, 3, 3, 1, 2, 2, 1),            # dilation
    (1, 3, 8, 8, 16, 7, 7, 2, 3, 1, 1),           # ResNet stem shape, small
    (2, 8, 6, 6, 12, 3, 3, 1, 1, 1, 4),           # grouped
    (1, 6, 7, 7, 6, 3, 3, 1, 1, 1, 6),            # depthwise
    (2, 5, 9, 8, 5, 3, 3, 2, 1, 1, 5),            # depthwise strided
    (1, 4, 8, 8, 8, 5, 5, 1, 2, 1, 4),            # depthwise, channel multiplier 2
    (1, 3, 9, 9, 3, 3, 3, 1, (1, 1, 0, 2), 2, 3),  # depthwise, asymmetric pad, dilation
    (1, 5, 20, 19, 13, 3, 3, 2, 1, 1, 1),         # several position blocks, channel tail
    (2, 9, 17, 23, 7, 3, 3, 3, 1, 1, 1),          # stride 3: scalar gather
    (1, 16, 12, 12, 70, 1, 1, 1, 0, 1, 1),        # 1x1: runs merge across rows
    (1, 4, 5, 70, 3, 1, 3, (1, 2), (0, 1), 1, 1),  # rows longer than a block
    (2, 3, 20, 33, 3, 3, 3, 1, 1, 1, 3),          # depthwise SIMD: 16-column steps + tail
    (1, 5, 19, 37, 5, 3, 3, 2, 1, 1, 5),          # depthwise SIMD stride 2
    (1, 4, 18, 21, 4, 5, 5, 1, 2, 1, 4),          # depthwise 5x5
    (5, 6, 3, 3, 13, 3, 3, 1, 1, 1, 1),           # position blocks span 5 images
    (9, 4, 2, 3, 7, 1, 1, 1, 0, 1, 1),            # 1x1, 9 images in one block
    (3, 8, 9, 9, 10, 3, 3, 2, 1, 1, 2),           # strided, grouped, blocks span images
    (1, 2, 30, 70, 2, 3, 3, 1, 1, 1, 2),          # depthwise VNNI: 64-output rows + tail
    (2, 3, 14, 14, 3, 3, 3, 2, 1, 1, 3),          # depthwise stride 2, flat (small map)
    (1, 2, 40, 75, 2, 5, 5, 2, 2, 1, 2),          # depthwise 5x5 stride 2, rows
    (1, 3, 11, 13, 6, 7, 6, 1, (3, 2, 1, 4), 1, 3),  # 7x6 kernel, asymmetric pad, mult 2
    (1, 2, 12, 12, 2, 3, 4, (2, 1), 1, (2, 1), 2),   # row dilation, row stride 2: rows
    (1, 2, 9, 9, 2, 1, 9, 1, (0, 4), 1, 2),       # kernel wider than 8: AVX-512 path
    (1, 2, 12, 12, 2, 3, 3, 1, (2, 2, 1, 1), (2, 1), 2),  # row dilation, unpadded path
    (2, 3, 6, 5, 3, 3, 3, 1, (0, 0, 1, 1), 1, 3),  # unpadded, no row padding: oh < h
    # AVX-VNNI depthwise: 32-output rows, stride 2 over a flat plane, an 8x8 kernel
    (1, 2, 6, 64, 2, 3, 3, 1, 1, 1, 2),
    (1, 3, 6, 6, 3, 3, 3, 2, 1, 1, 3),
    (1, 2, 13, 17, 4, 8, 8, 1, (3, 4, 4, 3), 1, 2),
    (1, 60, 7, 7, 14, 3, 3, 1, 1, 1, 1),          # 540 rows k: past 128 k-quads
    (3, 130, 4, 5, 9, 3, 3, 1, 1, 1, 1),          # 1170 rows k, the block spans images
    (1, 140, 5, 5, 8, 3, 3, 2, 1, 1, 2),          # grouped, 630 rows k per group
    # >= 8 position blocks of >= 512 rows k: AVX2 widens the weights once per call
    (2, 64, 16, 16, 9, 3, 3, 1, 1, 1, 1),
    (1, 128, 20, 20, 8, 3, 3, 1, 1, 1, 2),
    # >= 8 position blocks (kChanMinVisits): the AVX2 tiles read a channel table made once
    # per call; a shallow 1x1 layer (4 k-quads) and a 3x3 one
    (2, 16, 20, 20, 20, 1, 1, 1, 0, 1, 1),
    (1, 8, 24, 24, 13, 3, 3, 1, 1, 1, 1),
    # blocks whose last positions the VNNI tile runs as extras, the channels in the lanes
    # (int8_cgemm_vnni.cpp): 49 = 3 panels + 1 (and a 1-channel weight block, which takes
    # a panel), 18 = 1 panel + 2, 3 alone
    (1, 8, 7, 7, 13, 3, 3, 1, 1, 1, 1),
    (2, 4, 3, 3, 12, 1, 1, 1, 0, 1, 1),
    (1, 6, 1, 3, 6, 1, 1, 1, 0, 1, 1),
]


def conv_case(rng, case, in_dtype, scales=None):
    n, c, h, w, oc, kh, kw, stride, padding, dilation, groups = case
    lo, hi = R.qrange(in_dtype)
    x = rng.integers(lo, hi + 1, (n, c, h, w)).astype(in_dtype)
    wt = rng.integers(-128, 128, (oc, c // groups, kh, kw)).astype(np.int8)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    real = rng.uniform(2e-4, 4e-3, oc) if scales is None else np.resize(scales, oc)
    mult, shift = R.quantize_multiplier(real)
    geom = dict(stride=stride, padding=padding, dilation=dilation)
    return x, wt, bias, mult, shift, geom, groups


# The two algorithms of the non-depthwise conv (framework/csrc/int8_cgemm/int8_cgemm.h), each forced:
# every case above whose C/groups is a multiple of 4 (which direct needs), and shapes for the
# direct algorithm's edges: rows wider than a 64-position block, blocks over several rows,
# stride phases 2 and 3, dilation, asymmetric padding, oh < h, output-channel chunks at
# batch 1, groups, several images.
ALGO_CASES = [c for c in CASES if (c[1] // c[10]) % 4 == 0 and c[1] != c[10]] + [
    (1, 4, 3, 70, 5, 3, 3, 1, 1, 1, 1),
    (2, 8, 9, 11, 13, 3, 3, 2, 1, 1, 1),
    (1, 12, 20, 70, 9, 3, 3, 1, 1, 1, 1),
    (1, 8, 9, 9, 6, 3, 3, 1, 2, 2, 1),
    (1, 8, 11, 13, 5, 5, 3, (2, 1), (2, 1, 0, 3), 1, 1),
    (1, 4, 17, 19, 5, 3, 3, 3, 1, 1, 1),
    (2, 8, 6, 7, 5, 3, 3, 1, 0, 1, 1),
    (1, 8, 5, 5, 40, 3, 3, 1, 1, 1, 1),
    (2, 16, 7, 9, 12, 3, 3, 1, 1, 1, 2),
    (1, 8, 20, 33, 8, 1, 1, 2, 0, 1, 1),
    # stride 2 with both column phases of a row from one load (AVX-512, up to 32 quads a
    # phase): even widths, so that each phase row's last quad is input, not padding
    (2, 8, 10, 40, 6, 3, 3, 2, 1, 1, 1),
    (1, 4, 8, 12, 5, 3, 3, 2, 1, 1, 1),
    # stride 2: rows wider than 64 bytes, odd widths, no left padding
    (1, 4, 6, 70, 5, 3, 3, 2, 1, 1, 1),
    (2, 8, 7, 9, 6, 3, 3, 2, 0, 1, 1),
    # unit stride, where a row's right padding is the next row's left (pr <= pl) and the reads
    # past a row's end wrap onto it: pl > pr; pr > pl (not shared); kw 2, no column dropped
    (2, 8, 6, 7, 5, 3, 3, 1, (1, 2, 2, 1), 1, 1),
    (1, 4, 5, 9, 6, 3, 3, 1, (1, 1, 0, 2), 1, 1),
    (2, 8, 5, 6, 7, 3, 2, 1, 1, 1, 1),
    # padding wider than the kernel reaches (pr > (kw - 1) * dw: more output columns a row
    # than a shared row holds): a 1x1 conv padded, a 3x3 padded by 3, a dilated one by 5
    (2, 4, 5, 9, 7, 1, 1, 1, (0, 1, 1, 1), 1, 1),
    (1, 8, 6, 7, 5, 3, 3, 1, 3, 1, 1),
    (1, 4, 7, 8, 6, 3, 3, 1, (1, 1, 5, 5), (1, 2), 1),
]
