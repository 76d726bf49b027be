"""Box coder: boxes <-> regression targets relative to anchors (Girshick et al., R-CNN,
1311.2524 appendix C), as torchvision's `BoxCoder` (models/detection/_utils.py), in numpy.

encode: dx = wx * (gx - ax) / aw, dy = wy * (gy - ay) / ah, dw = ww * log(gw / aw),
dh = wh * log(gh / ah) for centres (x, y) and sizes (w, h); decode inverts it, with dw and
dh clamped at log(1000 / 16) so that exp stays finite. float32 throughout, torchvision's
expressions in its order (RetinaNet: weights (1, 1, 1, 1); Faster R-CNN: (10, 10, 5, 5)).

>>> coder = BoxCoder((1.0, 1.0, 1.0, 1.0))
>>> a = np.array([[0, 0, 10, 10]], np.float32)
>>> coder.decode(coder.encode(np.array([[1, 2, 9, 12]], np.float32), a), a).tolist()
[[1.0, 2.0, 9.0, 12.0]]
"""
import math

import numpy as np

BBOX_XFORM_CLIP = math.log(1000.0 / 16)


def _centres(boxes):
    widths = boxes[:, 2] - boxes[:, 0]
    heights = boxes[:, 3] - boxes[:, 1]
    return boxes[:, 0] + 0.5 * widths, boxes[:, 1] + 0.5 * heights, widths, heights


class BoxCoder:
    def __init__(self, weights, bbox_xform_clip=BBOX_XFORM_CLIP):
        self.weights = tuple(float(w) for w in weights)
        self.bbox_xform_clip = bbox_xform_clip

    def encode(self, boxes, anchors):
        """(N, 4) targets of (N, 4) `boxes` (xyxy) against their (N, 4) `anchors`."""
        dtype = boxes.dtype
        wx, wy, ww, wh = np.asarray(self.weights, dtype)
        ax, ay, aw, ah = _centres(anchors.astype(dtype, copy=False))
        gx, gy, gw, gh = _centres(boxes)
        return np.stack([wx * (gx - ax) / aw, wy * (gy - ay) / ah,
                         ww * np.log(gw / aw), wh * np.log(gh / ah)], axis=1)

    def decode(self, codes, anchors):
        """(N, 4) xyxy boxes from (N, 4) `codes` against their (N, 4) `anchors`."""
        anchors = anchors.astype(codes.dtype, copy=False)
        ax, ay, aw, ah = _centres(anchors)
        wx, wy, ww, wh = self.weights
        dx, dy = codes[:, 0] / wx, codes[:, 1] / wy
        dw = np.minimum(codes[:, 2] / ww, self.bbox_xform_clip)
        dh = np.minimum(codes[:, 3] / wh, self.bbox_xform_clip)
        cx, cy = dx * aw + ax, dy * ah + ay
        half_w, half_h = 0.5 * (np.exp(dw) * aw), 0.5 * (np.exp(dh) * ah)
        return np.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], axis=1)
