"""Numpy twins of the affine warp and colour kernels (framework/csrc/imgproc/), OpenCV's
`cv2.warpAffine` and `cv2.cvtColor` semantics: the living spec of `F.warp_affine` and
`F.cvt_color`. Images are (H, W) or (H, W, C), uint8 or float32.

warp_affine: `matrix` (2x3) maps source pixel indices to output ones, as cv2's; it is
inverted in double (cv2's formula), then rounded to float32, and every output pixel (x, y)
reads the source at, in float32 with one rounding per operation (OpenCV's portable path):

    sx = m0 * x + (m1 * y + m2),   sy = m3 * x + (m4 * y + m5)
    bilinear: i = floor(s), a = s - i; v0 = p00 + ax * (p01 - p00), v1 likewise,
              v = v0 + ay * (v1 - v0); uint8: rounded half to even, saturated
    nearest:  the pixel at round-half-even(s)

Neighbours outside the image take `value` (border "constant") or the nearest edge pixel
("replicate"). OpenCV's AVX2 build fuses some multiply-adds (FMA), so its output can differ
from this one by one grey level on about 1e-5 of the pixels; its portable build
(cv2.setUseOptimized(False)) equals it.

cvt_color (uint8 in OpenCV's fixed point; float32 in float):
    gray = (3735 b + 19235 g + 9798 r + 2^14) >> 15       (float: .114 b + .587 g + .299 r)
    NV12 / NV21 (Y plane (H, W), then interleaved U,V / V,U at half resolution: a
    (H * 3/2, W) array): BT.601 video range, 20-bit fixed point,
    y = max(0, Y - 16) * 1220542; R = (y + 1673527 v + 2^19) >> 20,
    G = (y - 852492 v - 409993 u + 2^19) >> 20, B = (y + 2116026 u + 2^19) >> 20
    (u, v = U - 128, V - 128), saturated.

>>> warp_affine_ref(np.arange(16, dtype=np.uint8).reshape(4, 4), [[1, 0, 1], [0, 1, 0]], (4, 4))
array([[ 0,  0,  1,  2],
       [ 0,  4,  5,  6],
       [ 0,  8,  9, 10],
       [ 0, 12, 13, 14]], dtype=uint8)
"""
import numpy as np

BORDERS = ("constant", "replicate")
COLOR_CODES = ("bgr2rgb", "rgb2bgr", "bgr2gray", "rgb2gray", "nv12_to_bgr", "nv12_to_rgb",
               "nv21_to_bgr", "nv21_to_rgb")
GRAY_COEFFS = (3735, 19235, 9798)     # b, g, r in 15-bit fixed point (sum 2^15)
GRAY_FLOAT = (0.114, 0.587, 0.299)
YUV_SHIFT = 20
YUV_CY, YUV_CVR, YUV_CVG, YUV_CUG, YUV_CUB = 1220542, 1673527, -852492, -409993, 2116026


def invert_affine(matrix):
    """The inverse of a 2x3 affine in double, by cv::invertAffineTransform's formula
    (a singular matrix gives zeros, as cv2's)."""
    m = np.asarray(matrix, np.float64).reshape(6).copy()
    d = m[0] * m[4] - m[1] * m[3]
    d = 1.0 / d if d != 0 else 0.0
    a11, a22 = m[4] * d, m[0] * d
    m[0], m[1], m[3], m[4] = a11, -m[1] * d, -m[3] * d, a22
    b1 = -m[0] * m[2] - m[1] * m[5]
    b2 = -m[3] * m[2] - m[4] * m[5]
    m[2], m[5] = b1, b2
    return m


def warp_coords(inverse, out_hw):
    """(sy, sx) float32 source coordinates (OH, OW) of every output pixel."""
    m = inverse.astype(np.float32)
    ys = np.arange(out_hw[0], dtype=np.float32)[:, None]
    xs = np.arange(out_hw[1], dtype=np.float32)[None, :]
    sx = m[0] * xs + (m[1] * ys + m[2])
    sy = m[3] * xs + (m[4] * ys + m[5])
    far = np.float32(4e6)   # far outside stays outside (NaN goes there): exact integer casts
    sx, sy = (np.where(v > -far, np.minimum(v, far), -far) for v in (sx, sy))
    return sy.astype(np.float32), sx.astype(np.float32)


def _fetch(x, iy, ix, border, value):
    h, w = x.shape[:2]
    v = x[np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)]
    if border == "constant":
        inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
        v = np.where(inside[..., None], v, np.asarray(value, x.dtype))
    return v


def border_value(value, channels, uint8):
    """The per-channel fill (C,) as the kernel sees it: float32, saturated for uint8."""
    v = np.broadcast_to(np.asarray(value, np.float64), (channels,))
    if uint8:
        v = np.clip(np.rint(v), 0, 255)
    return v.astype(np.float32)


def warp_affine_ref(image, matrix, size, mode="bilinear", border="constant", value=0.0,
                    inverse_map=False):
    """`image` warped by `matrix` into size (OH, OW); `inverse_map`: matrix maps output to
    source already (cv2.WARP_INVERSE_MAP)."""
    src = np.asarray(image)
    x = (src if src.ndim == 3 else src[..., None]).astype(np.float32)
    uint8 = src.dtype == np.uint8
    inverse = np.asarray(matrix, np.float64).reshape(6) if inverse_map else invert_affine(matrix)
    sy, sx = warp_coords(inverse, size)
    fill = border_value(value, x.shape[2], uint8)
    if mode == "nearest":
        out = _fetch(x, np.rint(sy).astype(np.int64), np.rint(sx).astype(np.int64), border, fill)
    else:
        iy, ix = np.floor(sy).astype(np.int64), np.floor(sx).astype(np.int64)
        ay = (sy - iy.astype(np.float32))[..., None]
        ax = (sx - ix.astype(np.float32))[..., None]
        p00, p01 = _fetch(x, iy, ix, border, fill), _fetch(x, iy, ix + 1, border, fill)
        p10, p11 = _fetch(x, iy + 1, ix, border, fill), _fetch(x, iy + 1, ix + 1, border, fill)
        v0 = p00 + ax * (p01 - p00)
        v1 = p10 + ax * (p11 - p10)
        out = (v0 + ay * (v1 - v0)).astype(np.float32)
    out = np.clip(np.rint(out), 0, 255).astype(np.uint8) if uint8 else out.astype(src.dtype)
    return out if src.ndim == 3 else out[..., 0]


def _gray(x, blue_first):
    """Channels in memory order times their coefficients (OpenCV's order of the float sum)."""
    order = slice(None) if blue_first else slice(None, None, -1)
    if x.dtype == np.uint8:
        c0, c1, c2 = GRAY_COEFFS[order]
        total = (x[..., 0].astype(np.int64) * c0 + x[..., 1].astype(np.int64) * c1 +
                 x[..., 2].astype(np.int64) * c2)
        return ((total + (1 << 14)) >> 15).astype(np.uint8)
    c0, c1, c2 = (np.float32(c) for c in GRAY_FLOAT[order])
    return (x[..., 0] * c0 + x[..., 1] * c1 + x[..., 2] * c2).astype(x.dtype)


def nv_to_rgb(yuv, v_first, blue_first):
    """(H * 3/2, W) NV12 (U first) / NV21 (V first) -> (H, W, 3) uint8."""
    h, w = yuv.shape[0] * 2 // 3, yuv.shape[1]
    luma = yuv[:h].astype(np.int64)
    uv = yuv[h:h + h // 2].reshape(h // 2, w // 2, 2).astype(np.int64) - 128
    u, v = (uv[..., 1], uv[..., 0]) if v_first else (uv[..., 0], uv[..., 1])
    u = u.repeat(2, 0).repeat(2, 1)
    v = v.repeat(2, 0).repeat(2, 1)
    y = np.maximum(luma - 16, 0) * YUV_CY
    half = 1 << (YUV_SHIFT - 1)
    r = (y + YUV_CVR * v + half) >> YUV_SHIFT
    g = (y + YUV_CVG * v + YUV_CUG * u + half) >> YUV_SHIFT
    b = (y + YUV_CUB * u + half) >> YUV_SHIFT
    planes = (b, g, r) if blue_first else (r, g, b)
    return np.clip(np.stack(planes, -1), 0, 255).astype(np.uint8)


def cvt_color_ref(image, code):
    x = np.asarray(image)
    if code in ("bgr2rgb", "rgb2bgr"):
        return np.ascontiguousarray(x[..., ::-1])
    if code in ("bgr2gray", "rgb2gray"):
        return _gray(x, code == "bgr2gray")
    if code.startswith("nv"):
        return nv_to_rgb(x, code.startswith("nv21"), code.endswith("bgr"))
    raise ValueError(f"cvt_color: code must be one of {', '.join(COLOR_CODES)}, got {code!r}")


def to_chw_ref(image, mean=None, std=None, scale=1.0):
    """(H, W, C) -> (C, H, W) float32: (x * scale - mean) / std per channel."""
    x = np.asarray(image).astype(np.float32) * np.float32(scale)
    c = x.shape[2]
    if mean is not None:
        x = x - np.broadcast_to(np.asarray(mean, np.float32), (c,))
    if std is not None:
        x = x / np.broadcast_to(np.asarray(std, np.float32), (c,))
    return np.ascontiguousarray(x.transpose(2, 0, 1)).astype(np.float32)
