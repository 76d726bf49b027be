"""Greedy NMS and per-category NMS, native (framework/csrc/nms/); the numpy twins, and the
spec, are boxes.nms and boxes.batched_nms: the kept indices are equal (tests compare them).

batched_nms follows torchvision's CPU rule as the spec does: up to
boxes.BATCHED_NMS_PER_CLASS_ABOVE coordinates, one NMS over boxes offset by
category * (max coordinate + 1), so that categories never overlap; above, NMS per category.
"""
import numpy as np

from .. import _C
from . import boxes as B


def nms(boxes, scores, iou_threshold):
    """int64 indices of the kept boxes, by decreasing score."""
    return _C.nms(boxes, scores, float(iou_threshold))


def batched_nms(boxes, scores, idxs, iou_threshold):
    """int64 indices kept within each category `idxs`, by decreasing score."""
    if boxes.shape[0] == 0:
        return np.zeros(0, np.int64)
    if boxes.size > B.BATCHED_NMS_PER_CLASS_ABOVE:
        return _C.batched_nms(boxes, scores, idxs.astype(np.int64, copy=False),
                              float(iou_threshold))
    offsets = idxs.astype(boxes.dtype) * (boxes.max() + np.ones((), boxes.dtype))
    return _C.nms(boxes + offsets[:, None], scores, float(iou_threshold))
