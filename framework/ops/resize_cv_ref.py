"""Numpy twin of the image resize kernels (framework/csrc/imgproc/), OpenCV's `cv2.resize`
semantics: the living spec of `F.resize`.

A resize is separable: per axis, each output index reads K source indices (clamped into the
image: replicate border) with K weights, the taps. `resize_plan` computes them exactly as
OpenCV's `cv::resize` does (double coordinates, float weights, its special cases) and names
the arithmetic a kernel uses to combine them:

    mode      | taps (per axis)                                   | uint8 kind
    nearest   | floor(d * in/out), clamped                        | "nearest" (a gather)
    bilinear  | src = (d + 0.5) * in/out - 0.5; floor, frac      | "linear"  (11-bit fixed point)
    bicubic   | the same src, Keys' cubic with A = -0.75, 4 taps  | "cubic"   (fixed, float vertical)
    area      | out <= in on both axes: box weights of each cell; | "box" (integer factor) or
              | else bilinear-like taps from the cell edges       | "area" (float) / "linear"

uint8 arithmetic (what makes the result equal OpenCV's bit for bit):
- "linear": weights w -> int16 round(w * 2048); a row pass h = sum_k src * wx_k (int32);
  the column pass is OpenCV's SIMD one: ((h0 >> 4) * wy0 >> 16) + ((h1 >> 4) * wy1 >> 16),
  then (v + 2) >> 2, saturated.
- "cubic": the same int32 row pass with 4 taps; columns in float:
  round(h0 * b0 + (h1 * b1 + (h2 * b2 + h3 * b3))), b_k = wy_k / 2^22, half to even.
- "box" (integer factor k > 2 on both axes, out = in / k): the int sum of each k x k cell
  times float(1 / k^2), rounded half to even. k = 2 is "linear" with weights 1/2, which is
  OpenCV's (sum + 2) >> 2.
- "area" (non-integer shrink): float32 sums in tap order, rows then columns, starting
  from 0; rounded half to even.
float32 images use the float weights with sums in tap order ("float"): within float
rounding of OpenCV's (it orders some sums differently).

>>> img = np.arange(12, dtype=np.uint8).reshape(3, 4)
>>> resize_ref(img, (2, 2), "bilinear")
array([[ 3,  5],
       [ 8, 10]], dtype=uint8)
"""
import functools
import math
from collections import namedtuple

import numpy as np

MODES = ("nearest", "bilinear", "bicubic", "area")
COEF_BITS = 11
COEF_SCALE = 1 << COEF_BITS

# kind: the arithmetic; x, y: per-axis Taps; scale: "box"'s 1 / k^2 (float32)
Plan = namedtuple("Plan", "kind x y scale")
# index (out, K) int32 clamped source indices; weight (out, K) float32; fixed (out, K) int16
Taps = namedtuple("Taps", "index weight fixed")


def _fixed(weight):
    """OpenCV's saturate_cast<short>(w * INTER_RESIZE_COEF_SCALE): float product, half-even."""
    scaled = (weight.astype(np.float32) * np.float32(COEF_SCALE)).astype(np.float32)
    return np.clip(np.rint(scaled), -32768, 32767).astype(np.int16)


def _taps(index, weight, size):
    index = np.clip(index, 0, size - 1).astype(np.int32)
    weight = weight.astype(np.float32)
    return Taps(np.ascontiguousarray(index), np.ascontiguousarray(weight), _fixed(weight))


def _centre(n, o):
    """(floor, frac) of OpenCV's src = (d + 0.5) * scale - 0.5 (double, then float)."""
    scale = 1.0 / (o / n)
    f = ((np.arange(o) + 0.5) * scale - 0.5).astype(np.float32)
    s = np.floor(f).astype(np.int64)
    return s, (f - s.astype(np.float32)).astype(np.float32)


def nearest_taps(n, o):
    index = np.floor(np.arange(o) * (1.0 / (o / n))).astype(np.int64)
    return _taps(index[:, None], np.ones((o, 1), np.float32), n)


def linear_taps(n, o, area=False, edge=True):
    """Two taps; `area` gives INTER_AREA's enlarging taps (from the cell edges). With `edge`
    (OpenCV's row pass) a source position past either edge takes that edge pixel with weight
    1; without (its column pass) only the indices are clamped, the weights stay."""
    if area:
        inv = o / n
        s = np.floor(np.arange(o) * (1.0 / inv)).astype(np.int64)
        f = ((np.arange(o) + 1) - (s + 1) * inv).astype(np.float32)
        f = np.where(f <= 0, np.float32(0), f - np.floor(f)).astype(np.float32)
    else:
        s, f = _centre(n, o)
    if edge:
        low, high = s < 0, s >= n - 1
        f = np.where(low | high, np.float32(0), f).astype(np.float32)
        s = np.where(low, 0, np.where(high, n - 1, s))
    weight = np.stack([np.float32(1) - f, f], 1)
    return _taps(np.stack([s, s + 1], 1), weight, n)


def cubic_weights(x):
    """Keys' cubic (A = -0.75) at frac x (float32), in OpenCV's order of operations."""
    f = np.float32
    a, x = f(-0.75), x.astype(np.float32)
    x1, y = x + f(1), f(1) - x
    c0 = ((a * x1 - f(5) * a) * x1 + f(8) * a) * x1 - f(4) * a
    c1 = ((a + f(2)) * x - (a + f(3))) * x * x + f(1)
    c2 = ((a + f(2)) * y - (a + f(3))) * y * y + f(1)
    c3 = f(1) - c0 - c1 - c2
    return np.stack([c0, c1, c2, c3], 1).astype(np.float32)


def cubic_taps(n, o):
    s, f = _centre(n, o)
    return _taps(s[:, None] + np.arange(-1, 3)[None, :], cubic_weights(f), n)


def area_taps(n, o):
    """INTER_AREA's shrinking cells (computeResizeAreaTab): each output averages the source
    pixels its cell covers, partial pixels by their covered fraction; padded with weight-0
    taps on the last index to a common K."""
    scale = n / o
    rows = []
    for d in range(o):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, n - f1)
        s2 = min(math.floor(f2), n - 1)
        s1 = min(math.ceil(f1), s2)
        row = []
        if s1 - f1 > 1e-3:
            row.append((s1 - 1, np.float32((s1 - f1) / cell)))
        row += [(s, np.float32(1.0 / cell)) for s in range(s1, s2)]
        if f2 - s2 > 1e-3:
            row.append((s2, np.float32(min(min(f2 - s2, 1.0), cell) / cell)))
        rows.append(row)
    k = max(len(r) for r in rows)
    index = np.zeros((o, k), np.int64)
    weight = np.zeros((o, k), np.float32)
    for d, row in enumerate(rows):
        index[d] = row[-1][0]
        for j, (s, w) in enumerate(row):
            index[d, j], weight[d, j] = s, w
    return _taps(index, weight, n)


def box_taps(n, o, ones=False):
    """k = n / o source pixels per output; `ones`: integer weights 1 (the "box" sum)."""
    k = n // o
    index = np.arange(o)[:, None] * k + np.arange(k)[None, :]
    taps = _taps(index, np.full((o, k), 1.0 / k, np.float32), n)
    return taps._replace(fixed=np.ones((o, k), np.int16)) if ones else taps


@functools.lru_cache(maxsize=256)
def resize_plan(in_hw, out_hw, mode, uint8, channels=1):
    """The Plan of a resize (H, W) -> (OH, OW); cached (tap tables are small)."""
    (h, w), (oh, ow) = in_hw, out_hw
    if mode in ("bilinear", "area") and (w, h) == (2 * ow, 2 * oh) and channels != 2:
        # OpenCV halves by (a + b + c + d + 2) >> 2: the bilinear taps' arithmetic
        return Plan("linear" if uint8 else "float", box_taps(w, ow), box_taps(h, oh), 0.0)
    if mode == "nearest":
        return Plan("nearest", nearest_taps(w, ow), nearest_taps(h, oh), 0.0)
    if mode == "bicubic":
        return Plan("cubic" if uint8 else "float", cubic_taps(w, ow), cubic_taps(h, oh), 0.0)
    if mode == "bilinear":
        return Plan("linear" if uint8 else "float", linear_taps(w, ow),
                    linear_taps(h, oh, edge=False), 0.0)
    if mode != "area":
        raise ValueError(f"resize: mode must be one of {', '.join(MODES)}, got {mode!r}")
    if oh > h or ow > w:   # OpenCV: bilinear-like taps from the cell edges, on both axes
        return Plan("linear" if uint8 else "float", linear_taps(w, ow, True),
                    linear_taps(h, oh, True, edge=False), 0.0)
    kx, ky = w / ow, h / oh
    if kx == int(kx) and ky == int(ky):
        kx, ky = int(kx), int(ky)
        return Plan("box" if uint8 else "float", box_taps(w, ow, uint8), box_taps(h, oh, uint8),
                    float(np.float32(1.0) / np.float32(kx * ky)))
    return Plan("area" if uint8 else "float", area_taps(w, ow), area_taps(h, oh), 0.0)


# ---------------------------------------------------------------------------- the arithmetic

def _rows(x, taps, dtype):
    """The row pass: (B, H, OW, C) = sum_k x[:, :, index[:, k]] * w[:, k], in tap order."""
    index, weight = taps
    out = np.zeros(x.shape[:2] + (index.shape[0],) + x.shape[3:], dtype)
    for k in range(index.shape[1]):
        out += x[:, :, index[:, k]] * weight[:, k][None, None, :, None]
    return out


def _columns(h, taps, dtype):
    index, weight = taps
    out = np.zeros((h.shape[0], index.shape[0]) + h.shape[2:], dtype)
    for k in range(index.shape[1]):
        out += h[:, index[:, k]] * weight[:, k][None, :, None, None]
    return out


def _round_u8(v):
    return np.clip(np.rint(v), 0, 255).astype(np.uint8)


def resample(x, plan):
    """(B, H, W, C) -> (B, OH, OW, C) by `plan`, in the plan's arithmetic."""
    kind, tx, ty = plan.kind, plan.x, plan.y
    if kind == "nearest":
        return np.ascontiguousarray(x[:, ty.index[:, 0]][:, :, tx.index[:, 0]])
    if kind == "float":   # float64 (gradient checks) keeps its precision
        dt = np.float64 if x.dtype == np.float64 else np.float32
        h = _rows(x.astype(dt), (tx.index, tx.weight.astype(dt)), dt)
        return _columns(h, (ty.index, ty.weight.astype(dt)), dt)
    if kind == "area":
        h = _rows(x.astype(np.float32), (tx.index, tx.weight), np.float32)
        return _round_u8(_columns(h, (ty.index, ty.weight), np.float32))
    xi = x.astype(np.int64)
    if kind == "box":
        h = _rows(xi, (tx.index, tx.fixed.astype(np.int64)), np.int64)
        total = _columns(h, (ty.index, ty.fixed.astype(np.int64)), np.int64)
        return _round_u8(total.astype(np.float32) * np.float32(plan.scale))
    h = _rows(xi, (tx.index, tx.fixed.astype(np.int64)), np.int64)
    rows = [h[:, ty.index[:, k]] for k in range(ty.index.shape[1])]
    beta = [ty.fixed[:, k].astype(np.int64)[None, :, None, None] for k in range(len(rows))]
    if kind == "linear":
        v = ((rows[0] >> 4) * beta[0] >> 16) + ((rows[1] >> 4) * beta[1] >> 16)
        return np.clip((v + 2) >> 2, 0, 255).astype(np.uint8)
    if kind == "cubic":
        f = [r.astype(np.float32) for r in rows]
        b = [(ty.fixed[:, k].astype(np.float32) * np.float32(1.0 / (1 << 22)))[None, :, None, None]
             for k in range(4)]
        v = f[0] * b[0] + (f[1] * b[1] + (f[2] * b[2] + f[3] * b[3]))
        return _round_u8(v.astype(np.float32))
    raise ValueError(f"resize: unknown plan kind {kind!r}")


def resize_ref(image, size, mode="bilinear"):
    """`image` (H, W) or (H, W, C), uint8 or float32 -> (OH, OW[, C]); size = (OH, OW)."""
    x = np.asarray(image)
    hwc = x if x.ndim == 3 else x[..., None]
    plan = resize_plan(hwc.shape[:2], tuple(size), mode, x.dtype == np.uint8, hwc.shape[2])
    out = resample(hwc[None], plan)[0]
    return out if x.ndim == 3 else out[..., 0]
