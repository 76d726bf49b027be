"""RoIAlign and the FPN multi-scale RoI pooler (torchvision.ops.roi_align and
MultiScaleRoIAlign): native kernels with a hand-written backward (ops/roi_align.py; numpy
twin ops/roi_align_ref.py).

Boxes are given per image as a list of (K_i, 4) x1, y1, x2, y2 in image pixels, or as one
(K, 5) array whose first column is the image index (torchvision's two formats).

>>> import tianyuan as ty, tianyuan.functional as F
>>> x = ty.randn(1, 8, 16, 16)
>>> F.roi_align(x, [np.array([[0., 0, 8, 8]], np.float32)], 2, sampling_ratio=2).shape
(1, 8, 2, 2)
"""
import numpy as np

from .. import dtypes
from ..ops import roi_align as RA
from ..ops import roi_align_ref as ref
from ..tensor import Tensor, as_tensor
from ._args import image_tensor, pair


def _numpy(x):
    return np.asarray(x.data if isinstance(x, Tensor) else x)


def as_rois(boxes, dtype, op="roi_align"):
    """(K, 5) rois (image index, x1, y1, x2, y2) in `dtype` from either format."""
    if isinstance(boxes, (list, tuple)):
        parts = []
        for i, b in enumerate(boxes):
            b = _numpy(b)
            b = b.reshape(-1, 4) if b.size == 0 else b
            if b.ndim != 2 or b.shape[1] != 4:
                raise ValueError(f"{op}: boxes[{i}] must be (K, 4) x1, y1, x2, y2, got shape "
                                 f"{b.shape}")
            parts.append(np.concatenate([np.full((b.shape[0], 1), i, dtype),
                                         b.astype(dtype, copy=False)], axis=1))
        return np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros((0, 5), dtype))
    rois = _numpy(boxes)
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise ValueError(f"{op}: boxes must be a list of (K_i, 4) per image or one (K, 5) array "
                         f"(image index, x1, y1, x2, y2), got shape {rois.shape}")
    if not dtypes.is_floating(rois.dtype):
        rois = rois.astype(dtype)
    return np.ascontiguousarray(rois.astype(dtype, copy=False))


def roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
    """(K, C, ph, pw) bilinear RoI pooling of input (N, C, H, W) (He et al., Mask R-CNN).
    `spatial_scale` maps box pixels to the input's; `sampling_ratio` samples per bin and
    axis (<= 0: ceil(bin size)); `aligned` shifts boxes by -0.5 pixel (pixel centres)."""
    op = "roi_align"
    image_tensor(input, op)
    rois = as_rois(boxes, input.dtype, op)
    return RA.RoIAlign.apply(input, rois=rois, output_size=pair(output_size, "output_size", op, 1),
                             spatial_scale=float(spatial_scale),
                             sampling_ratio=int(sampling_ratio), aligned=bool(aligned))


def level_scales(features, image_shapes):
    """Each level's scale (a power of 2) against the batch's largest image, as torchvision's
    MultiScaleRoIAlign infers them."""
    largest = (max(s[0] for s in image_shapes), max(s[1] for s in image_shapes))
    return [ref.infer_scale(f.shape[-2:], largest) for f in features]


def multi_scale_roi_align(features, boxes, image_shapes, output_size, sampling_ratio=-1,
                          canonical_scale=224, canonical_level=4, eps=1e-6):
    """(K, C, ph, pw): each box pooled from the FPN level of its size (Lin et al., FPN eq. 1:
    level floor(4 + log2(sqrt(area) / 224)), clamped to the levels present). `features`:
    the levels, finest first, of scales 1/2^k_min .. 1/2^k_max of the images (`image_shapes`,
    their (h, w) before padding); boxes per image (list of (K_i, 4))."""
    op = "multi_scale_roi_align"
    if not features:
        raise ValueError(f"{op}: no feature levels")
    for k, f in enumerate(features):
        image_tensor(f, op, f"features[{k}]")
    dtype = features[0].dtype
    rois = as_rois(boxes, dtype, op)
    scales = level_scales(features, image_shapes)
    k_min, k_max = (int(round(-np.log2(s))) for s in (scales[0], scales[-1]))
    levels = ref.roi_levels(rois[:, 1:], k_min, k_max, canonical_scale, canonical_level, eps)
    return RA.MultiScaleRoIAlign.apply(*[as_tensor(f) for f in features], rois=rois,
                                       levels=levels, scales=tuple(scales),
                                       output_size=pair(output_size, "output_size", op, 1),
                                       sampling_ratio=int(sampling_ratio))
