"""MegEngine detectors' class and anchor layouts against ours (weights/megengine_detection.py
converts the files): COCO's 80 ids, the classes' rows, the anchors' order and centres."""
import math

import numpy as np

# COCO's 80 category ids; MegEngine's class k + 1 (Faster R-CNN column k + 1, RetinaNet row
# k) is category COCO_CATEGORY_IDS[k] (its COCO dataset numbers the sorted ids from 1)
COCO_GAPS = (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)
COCO_CATEGORY_IDS = tuple(i for i in range(1, 91) if i not in COCO_GAPS)
COCO_ID_COLUMNS = 91
ABSENT_LOGIT = -20.0       # see the module docstring; in int8 range of trained logits
ANCHOR_RATIOS = (0.5, 1.0, 2.0)   # every MegEngine detection config
RETINANET_OCTAVES = 3             # scales 2^0, 2^(1/3), 2^(2/3)
# FreeAnchor's reg_std: its 3x configs are RetinaNet's network with P6 from P5 (as ours)
FREEANCHOR_STD = (0.1, 0.1, 0.2, 0.2)
# anchor size / stride at a level's first scale (v1.0+: anchor_scales [[32..512]] over strides
# 8..128 for RetinaNet, 4..64 for the RPN)
_SIZE_PER_STRIDE = {"retinanet": 4.0, "fasterrcnn": 8.0}



class DetectionArchitectureError(ValueError):
    """A MegEngine detector whose architecture ours cannot reproduce (says where)."""


_CLASS_KEYS = {"retinanet": "head.classification_head.cls_logits.weight",
               "fasterrcnn": "roi_heads.box_predictor.cls_score.weight"}


def _class_layout(family, num_classes, spec):
    """"coco_ids" (91 columns: COCO category ids, 0 the background or nothing) or
    "contiguous" (MegEngine's own: 80 classes, after a background column in Faster R-CNN)."""
    if spec is not None and _CLASS_KEYS[family] in spec:
        per = len(ANCHOR_RATIOS) * RETINANET_OCTAVES if family == "retinanet" else 1
        count = spec[_CLASS_KEYS[family]][0][0] // per
        background = family == "fasterrcnn" and count != COCO_ID_COLUMNS
        num_classes = count - 1 if background else count
    if num_classes is None or num_classes == COCO_ID_COLUMNS:
        return "coco_ids"
    if num_classes == len(COCO_CATEGORY_IDS):
        return "contiguous"
    raise DetectionArchitectureError(
        f"MegEngine detector: its COCO head converts to 91 classes (torchvision's COCO ids) or "
        f"80 (MegEngine's contiguous labels), not {num_classes}")


def _class_rows(values, columns, background, fill):
    """`values` with MegEngine's classes on axis 0 (80, after a background row if
    `background`) -> ours: kept ("contiguous") or each class at its COCO id of 91 rows, the
    rows of no class holding `fill` (the background row, if any, stays row 0)."""
    if columns == "contiguous":
        return values
    if values.shape[0] - int(background) != len(COCO_CATEGORY_IDS):
        raise DetectionArchitectureError(
            f"MegEngine detector: {values.shape[0] - int(background)} classes in the file; "
            "the COCO-id layout needs COCO's 80 (convert with num_classes of the file instead)")
    out = np.full((COCO_ID_COLUMNS,) + values.shape[1:], fill, values.dtype)
    if background:
        out[0] = values[0]
    out[list(COCO_CATEGORY_IDS)] = values[int(background):]
    return out


def _anchor_order(gen, num_anchors):
    """Ours a (ratio-major, torchvision's) -> their anchor index at a location: v0.5 is
    ratio-major too, Models 1.0+ scale-major (`for area in areas: for ratio in ratios`)."""
    ratios = len(ANCHOR_RATIOS)
    scales = num_anchors // ratios
    if gen == "v0.5" or scales == 1:
        return np.arange(num_anchors)
    return np.array([s * ratios + r for r in range(ratios) for s in range(scales)])


def _centre_shift(family, num_anchors):
    """(A, 4) code offsets, ours' anchor order, that move our anchor centre (i * stride) to
    theirs ((i + 0.5) * stride): dx += stride / (2 w), dy += stride / (2 h), where their
    w = size / sqrt(r), h = size * sqrt(r) and size = k * stride * 2^(s / 3)."""
    ratios = len(ANCHOR_RATIOS)
    shift = np.zeros((num_anchors, 4), np.float64)
    for a in range(num_anchors):
        ratio, scale = ANCHOR_RATIOS[a // (num_anchors // ratios)], a % (num_anchors // ratios)
        size = _SIZE_PER_STRIDE[family] * 2.0 ** (scale / RETINANET_OCTAVES)
        shift[a, :2] = math.sqrt(ratio) / (2 * size), 1.0 / (2 * size * math.sqrt(ratio))
    return shift
