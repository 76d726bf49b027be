"""Matcher: each anchor's ground-truth box by IoU, as torchvision's `Matcher`
(models/detection/_utils.py), in numpy.

For a (G, A) IoU matrix, anchor a gets the index of its best box when that IoU is
>= `high`, BETWEEN_THRESHOLDS (-2, ignored by the losses) when it is in [low, high), and
BELOW_LOW_THRESHOLD (-1, background) below `low`. With `allow_low_quality_matches`, every
anchor whose IoU with some box equals that box's best IoU over all anchors keeps its best
box whatever the thresholds (Faster R-CNN 3.1.2), so that no box goes unmatched.

>>> iou = np.array([[0.9, 0.45, 0.1], [0.2, 0.3, 0.35]], np.float32)
>>> Matcher(0.5, 0.4, allow_low_quality_matches=True)(iou).tolist()
[0, -2, 1]
"""
import numpy as np

BELOW_LOW_THRESHOLD = -1
BETWEEN_THRESHOLDS = -2


class Matcher:
    BELOW_LOW_THRESHOLD = BELOW_LOW_THRESHOLD
    BETWEEN_THRESHOLDS = BETWEEN_THRESHOLDS

    def __init__(self, high_threshold, low_threshold, allow_low_quality_matches=False):
        if low_threshold > high_threshold:
            raise ValueError(f"Matcher: low_threshold {low_threshold} is above "
                             f"high_threshold {high_threshold}")
        self.high_threshold, self.low_threshold = high_threshold, low_threshold
        self.allow_low_quality_matches = allow_low_quality_matches

    def __call__(self, iou):
        """(A,) int64 matches for a (G, A) IoU matrix (G >= 1 boxes, A >= 1 anchors)."""
        if iou.size == 0:
            what = "ground-truth boxes" if iou.shape[0] == 0 else "anchors"
            raise ValueError(f"Matcher: no {what} to match (IoU matrix of shape {iou.shape}); "
                             "an image without boxes is matched as all background by its model")
        best = iou.max(axis=0)
        matches = iou.argmax(axis=0).astype(np.int64)
        all_matches = matches.copy()
        matches[best < self.low_threshold] = BELOW_LOW_THRESHOLD
        matches[(best >= self.low_threshold) & (best < self.high_threshold)] = BETWEEN_THRESHOLDS
        if self.allow_low_quality_matches:
            # every (box, anchor) pair at the box's best IoU: those anchors keep their match
            _, anchors = np.nonzero(iou == iou.max(axis=1, keepdims=True))
            matches[anchors] = all_matches[anchors]
        return matches
