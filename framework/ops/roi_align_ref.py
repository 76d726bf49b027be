"""Numpy twin of the RoIAlign kernel (framework/csrc/roi_align/), torchvision's semantics
(torchvision/csrc/ops/cpu/roi_align_kernel.cpp), and the FPN level mapping of its
multi-scale pooler (torchvision.ops.poolers).

A RoI (batch index, x1, y1, x2, y2) in image pixels is scaled by `spatial_scale` (shifted
by -0.5 with `aligned`; without, each side is at least 1 pixel) and cut into
pooled_h x pooled_w bins; a bin averages grid_h x grid_w bilinear samples, the grid being
`sampling_ratio` per axis or, where it is <= 0, ceil(side / pooled side). A sample outside
[-1, H] x [-1, W] counts as 0; inside, it is clamped to the plane. Sampling is separable,
so each RoI's samples are an outer product of per-axis taps.

>>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
>>> roi_align_ref(x, np.array([[0, 0, 0, 4, 4]], np.float32), (1, 1), 1.0, 2, True)
array([[[[7.5]]]], dtype=float32)
"""
import math

import numpy as np


def roi_geometry(roi, spatial_scale, pooled, sampling_ratio, aligned, dtype):
    """(start (y, x), bin (y, x), grid (gh, gw), count) of one RoI, in `dtype` as the kernel."""
    t = np.dtype(dtype).type
    offset = t(0.5) if aligned else t(0.0)
    scale = t(spatial_scale)
    x1, y1, x2, y2 = (t(v) * scale - offset for v in roi[1:5])
    sides = [y2 - y1, x2 - x1]
    if not aligned:
        sides = [max(s, t(1.0)) for s in sides]
    bins = [s / t(p) for s, p in zip(sides, pooled)]
    grid = [sampling_ratio if sampling_ratio > 0 else int(math.ceil(s / t(p)))
            for s, p in zip(sides, pooled)]
    count = t(max(grid[0] * grid[1], 1))
    return (y1, x1), bins, grid, count


def axis_taps(start, bin_size, grid, pooled, size, dtype):
    """Per axis, (pooled, grid) arrays: low tap, high tap, their weights, and validity."""
    t = np.dtype(dtype).type
    grid = max(grid, 0)
    p = np.arange(pooled)[:, None].astype(dtype)
    i = (np.arange(grid)[None, :] + 0.5).astype(np.float32).astype(dtype)
    v = (start + p * bin_size) + i * bin_size / t(grid)          # (pooled, grid)
    valid = ~((v < -1.0) | (v > size))
    v = np.where(v <= 0, t(0), v)
    lo = np.floor(v).astype(np.int64)
    edge = lo >= size - 1
    lo = np.where(edge, size - 1, lo)
    hi = np.where(edge, size - 1, lo + 1)
    v = np.where(edge, lo.astype(dtype), v)
    wh = (v - lo.astype(dtype)).astype(dtype)
    wl = (t(1.0) - wh).astype(dtype)
    return lo, hi, wl * valid, wh * valid


def _roi_taps(roi, shape, pooled, spatial_scale, sampling_ratio, aligned, dtype):
    start, bins, grid, count = roi_geometry(roi, spatial_scale, pooled, sampling_ratio,
                                            aligned, dtype)
    ys = axis_taps(start[0], bins[0], grid[0], pooled[0], shape[2], dtype)
    xs = axis_taps(start[1], bins[1], grid[1], pooled[1], shape[3], dtype)
    return ys, xs, count


def roi_align_ref(x, rois, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
    """(R, C, ph, pw) RoIAlign of x (N, C, H, W) at rois (R, 5)."""
    pooled = tuple(output_size)
    out = np.zeros((rois.shape[0], x.shape[1]) + pooled, x.dtype)
    for r, roi in enumerate(rois):
        (ylo, yhi, ywl, ywh), (xlo, xhi, xwl, xwh), count = _roi_taps(
            roi, x.shape, pooled, spatial_scale, sampling_ratio, aligned, x.dtype)
        plane = x[int(roi[0])]                                      # (C, H, W)
        # (C, ph, gh, pw, gw): the four taps of every sample, weighted
        total = 0
        for yi, yw in ((ylo, ywl), (yhi, ywh)):
            for xi, xw in ((xlo, xwl), (xhi, xwh)):
                taps = plane[:, yi[:, :, None, None], xi[None, None, :, :]]
                total = total + taps * (yw[:, :, None, None] * xw[None, None, :, :])
        out[r] = (total.sum(axis=(2, 4)) / count).astype(x.dtype)
    return out


def roi_align_backward_ref(grad, rois, input_shape, spatial_scale=1.0, sampling_ratio=-1,
                           aligned=False):
    """d(input) (N, C, H, W) of RoIAlign given grad (R, C, ph, pw)."""
    pooled = grad.shape[2:]
    gx = np.zeros(input_shape, grad.dtype)
    for r, roi in enumerate(rois):
        (ylo, yhi, ywl, ywh), (xlo, xhi, xwl, xwh), count = _roi_taps(
            roi, input_shape, pooled, spatial_scale, sampling_ratio, aligned, grad.dtype)
        g = grad[r][:, :, None, :, None] / count                     # (C, ph, 1, pw, 1)
        plane = gx[int(roi[0])]
        for yi, yw in ((ylo, ywl), (yhi, ywh)):
            for xi, xw in ((xlo, xwl), (xhi, xwh)):
                w = yw[:, :, None, None] * xw[None, None, :, :]       # (ph, gh, pw, gw)
                yy = np.broadcast_to(yi[:, :, None, None], w.shape)
                xx = np.broadcast_to(xi[None, None, :, :], w.shape)
                for c in range(plane.shape[0]):
                    np.add.at(plane[c], (yy, xx), g[c] * w)
    return gx


def infer_scale(feature_size, image_size):
    """torchvision's _infer_scale: 2 ** round(log2(feature / image)) of the first axis, the
    log in float32."""
    approx = np.float32(float(feature_size[0]) / float(image_size[0]))
    return 2.0 ** float(np.round(np.log2(approx)))


def roi_levels(boxes, k_min, k_max, canonical_scale=224, canonical_level=4, eps=1e-6):
    """(R,) int64 level index (0 = k_min) of (R, 4) boxes: FPN paper eq. 1,
    floor(level0 + log2(sqrt(area) / 224) + eps) clamped to [k_min, k_max], in the boxes'
    dtype (torchvision's LevelMapper)."""
    dtype = boxes.dtype
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    s = np.sqrt(areas)
    levels = np.floor(dtype.type(canonical_level) + np.log2(s / dtype.type(canonical_scale)) +
                      dtype.type(eps))
    return (np.clip(levels, k_min, k_max).astype(np.int64) - k_min).astype(np.int64)
