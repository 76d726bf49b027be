"""Image preprocessing primitives, native (framework/csrc/imgproc/); numpy twins in
resize_cv_ref.py and imgproc_ref.py. Images here are (B, H, W, C) numpy arrays.

`Resize` is the differentiable one: a resize is linear in the image, out = Ry x Rx^T per
channel, so its backward is the transpose, scattered through the same taps.
"""
import numpy as np

from .. import _C
from ..autograd import Function
from .resize_cv_ref import resample, resize_plan

KINDS = {"nearest": 0, "linear": 1, "cubic": 2, "box": 3, "area": 4, "float": 1}


def resize_bhwc(x, size, mode):
    """(B, H, W, C) uint8 / float32 -> (B, OH, OW, C) natively; float64 by the numpy twin."""
    plan = resize_plan(tuple(x.shape[1:3]), tuple(size), mode, x.dtype == np.uint8, x.shape[3])
    if x.dtype not in (np.uint8, np.float32):
        return resample(x, plan)
    return _C.imgproc_resize(np.ascontiguousarray(x), tuple(size), *plan.x, *plan.y,
                             KINDS[plan.kind], plan.scale)


def _adjoint(g, taps, axis, size):
    """Transpose of sum_k w[:, k] * take(x, index[:, k], axis): (.., out, ..) -> (.., size, ..)"""
    shape = list(g.shape)
    shape[axis] = size
    out = np.zeros(shape, g.dtype)
    where = [None] * g.ndim
    where[axis] = slice(None)
    for k in range(taps.index.shape[1]):
        w = taps.weight[:, k].astype(g.dtype)[tuple(where)]
        moved = np.moveaxis(out, axis, 0)
        np.add.at(moved, taps.index[:, k], np.moveaxis(g * w, axis, 0))
    return out


class Resize(Function):
    """(B, H, W, C) float -> (B, OH, OW, C) by `mode`'s float taps, with its gradient."""

    def forward(self, x, size=None, mode="bilinear"):
        self.plan = resize_plan(tuple(x.shape[1:3]), tuple(size), mode, False, x.shape[3])
        self.in_hw = x.shape[1:3]
        return resize_bhwc(x, size, mode)

    def backward(self, g):
        gh = _adjoint(g, self.plan.y, 1, self.in_hw[0])   # (B, H, OW, C)
        return _adjoint(gh, self.plan.x, 2, self.in_hw[1])


def warp_affine_bhwc(x, inverse, size, mode, border, fill):
    """(B, H, W, C) warped; `inverse` (6,) maps output pixels to source ones (double)."""
    return _C.imgproc_warp_affine(np.ascontiguousarray(x), tuple(size), [float(v) for v in inverse],
                                  mode == "nearest", border == "replicate",
                                  [float(v) for v in fill])


def cvt_color_bhwc(x, code):
    """(B, H, W, 3) colour swaps and gray; NV12/NV21 (B, H * 3/2, W) -> (B, H, W, 3)."""
    if code.startswith("nv"):
        return _C.imgproc_nv_to_rgb(np.ascontiguousarray(x), code.startswith("nv21"),
                                    code.endswith("bgr"))
    return _C.imgproc_cvt_color(np.ascontiguousarray(x), code.endswith("gray"),
                                code == "bgr2gray")


def to_chw_bhwc(x, mean, std, scale):
    """(B, H, W, C) uint8 / float32 -> (B, C, H, W) float32, (x * scale - mean) / std."""
    return _C.imgproc_to_chw(np.ascontiguousarray(x), float(scale), mean, std)
