"""Geometry on item dicts: resize, crop, pad, flip, affine warp -- image, boxes and keypoints
move together.

Coordinates are continuous pixel coordinates: pixel (row i, column j) covers
[j, j+1) x [i, i+1), so the centre of pixel column c is x = c + 0.5. Boxes are xyxy
(N, 4); keypoints (N, K, 3) `x, y, v`. Affine matrices here are 2x3 in continuous
coordinates; `to_pixel_matrix` converts one for cv2.warpAffine, which works on
pixel-centre indices.
"""
import cv2
import numpy as np

INTERPOLATIONS = {"nearest": cv2.INTER_NEAREST, "bilinear": cv2.INTER_LINEAR,
                  "bicubic": cv2.INTER_CUBIC, "area": cv2.INTER_AREA}


def interpolation_flag(name):
    if name not in INTERPOLATIONS:
        raise ValueError(f"transforms: interpolation must be one of {sorted(INTERPOLATIONS)}, "
                         f"got {name!r}")
    return INTERPOLATIONS[name]


def image_size(item):
    """(height, width) of item["image"] (HWC)."""
    return item["image"].shape[0], item["image"].shape[1]


def resize(item, height, width, interpolation=cv2.INTER_LINEAR):
    """Resize to (height, width); boxes and keypoints scale with it (cv2 maps pixel centres
    with half-pixel offsets, so continuous coordinates scale exactly)."""
    old_h, old_w = image_size(item)
    out = dict(item)
    out["image"] = _ensure_hwc(cv2.resize(item["image"], (width, height),
                                          interpolation=interpolation), item["image"])
    sx, sy = width / old_w, height / old_h
    if "boxes" in item:
        out["boxes"] = (item["boxes"] * np.array([sx, sy, sx, sy], np.float32)).astype(np.float32)
    if "crowd_boxes" in item:
        out["crowd_boxes"] = (item["crowd_boxes"] * np.array([sx, sy, sx, sy], np.float32))
    if "keypoints" in item:
        points = item["keypoints"].copy()
        points[..., 0] *= sx
        points[..., 1] *= sy
        out["keypoints"] = points
    return out


def _ensure_hwc(image, like):
    # cv2 drops a trailing channel axis of size 1
    return image[..., None] if like.ndim == 3 and image.ndim == 2 else image


def crop(item, top, left, height, width, drop_empty=True):
    """Crop [top, top+height) x [left, left+width); boxes are clipped and, with
    `drop_empty`, boxes left without area are removed (with their labels and keypoints);
    keypoints that fall outside become v = 0."""
    out = dict(item)
    out["image"] = item["image"][top:top + height, left:left + width]
    offset = np.array([left, top, left, top], np.float32)
    limit = np.array([width, height, width, height], np.float32)
    keep = None
    if "boxes" in item:
        boxes = np.clip(item["boxes"] - offset, 0, limit)
        if drop_empty:
            keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        out["boxes"] = boxes.astype(np.float32)
    if "crowd_boxes" in item:
        out["crowd_boxes"] = np.clip(item["crowd_boxes"] - offset, 0, limit).astype(np.float32)
    if "keypoints" in item:
        points = item["keypoints"].copy()
        points[..., 0] -= left
        points[..., 1] -= top
        out["keypoints"] = _hide_outside(points, height, width)
    return _select(out, keep) if keep is not None and not keep.all() else out


def _hide_outside(points, height, width):
    outside = (points[..., 0] < 0) | (points[..., 0] >= width) | \
              (points[..., 1] < 0) | (points[..., 1] >= height)
    points[..., 2] = np.where(outside, 0, points[..., 2])
    return points


def _select(item, keep):
    for key in ("boxes", "labels", "keypoints"):
        if key in item:
            item[key] = item[key][keep]
    return item


def pad(item, height, width, value=0):
    """Pad at the bottom and right to (height, width); coordinates do not move."""
    h, w = image_size(item)
    if (h, w) == (height, width):
        return item
    if h > height or w > width:
        raise ValueError(f"pad: image {h}x{w} is larger than the target {height}x{width}")
    out = dict(item)
    image = item["image"]
    padded = np.full((height, width) + image.shape[2:], value, dtype=image.dtype)
    padded[:h, :w] = image
    out["image"] = padded
    return out


def pad_sides(item, top, left, bottom, right, value=0):
    """Pad each side by that many pixels of `value`; boxes and keypoints move by (left, top)."""
    out = dict(item)
    image = item["image"]
    sides = ((top, bottom), (left, right)) + ((0, 0),) * (image.ndim - 2)
    out["image"] = np.pad(image, sides, constant_values=value)
    shift = np.array([left, top, left, top], np.float32)
    for key in ("boxes", "crowd_boxes"):
        if key in item:
            out[key] = (item[key] + shift).astype(np.float32)
    if "keypoints" in item:
        points = item["keypoints"].copy()
        points[..., 0] += left
        points[..., 1] += top
        out["keypoints"] = points
    return out


def hflip(item, flip_pairs=None):
    """Mirror left-right; keypoints swap their left/right pairs (`flip_pairs`)."""
    _, width = image_size(item)
    out = dict(item)
    out["image"] = np.ascontiguousarray(item["image"][:, ::-1])
    for key in ("boxes", "crowd_boxes"):
        if key in item:
            boxes = item[key].copy()
            boxes[:, [0, 2]] = width - item[key][:, [2, 0]]
            out[key] = boxes
    if "keypoints" in item and item["keypoints"].size:
        if flip_pairs is None:
            raise ValueError("hflip: the item has keypoints but no flip_pairs were given; "
                             "pass flip_pairs (e.g. datasets.COCO_FLIP_PAIRS)")
        points = item["keypoints"].copy()
        points[..., 0] = width - points[..., 0]
        order = np.arange(points.shape[1])
        for left, right in flip_pairs:
            order[left], order[right] = right, left
        out["keypoints"] = points[:, order]
    return out


def to_pixel_matrix(matrix):
    """A continuous-coordinate 2x3 affine -> the pixel-index one cv2.warpAffine expects."""
    full = np.vstack([matrix, [0, 0, 1]])
    shift = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]])
    unshift = np.array([[1, 0, -0.5], [0, 1, -0.5], [0, 0, 1]])
    return (unshift @ full @ shift)[:2]


def apply_affine_points(matrix, points):
    """(..., 2) points through a 2x3 matrix."""
    return points @ matrix[:, :2].T + matrix[:, 2]


def warp_affine(item, matrix, height, width, interpolation=cv2.INTER_LINEAR, border=0):
    """Warp by `matrix` (2x3, continuous, source -> output) into (height, width)."""
    out = dict(item)
    out["image"] = _ensure_hwc(cv2.warpAffine(
        item["image"], to_pixel_matrix(matrix), (width, height), flags=interpolation,
        borderMode=cv2.BORDER_CONSTANT, borderValue=border), item["image"])
    if "boxes" in item:
        out["boxes"] = _warp_boxes(item["boxes"], matrix, height, width)
    if "keypoints" in item:
        points = item["keypoints"].copy()
        points[..., :2] = apply_affine_points(matrix, points[..., :2].astype(np.float64))
        out["keypoints"] = _hide_outside(points.astype(np.float32), height, width)
    out.pop("crowd_boxes", None)
    return out


def _warp_boxes(boxes, matrix, height, width):
    """Axis-aligned boxes around the warped corners, clipped."""
    if not len(boxes):
        return boxes.copy()
    x1, y1, x2, y2 = boxes.T.astype(np.float64)
    corners = np.stack([np.stack([x1, y1], 1), np.stack([x2, y1], 1),
                        np.stack([x1, y2], 1), np.stack([x2, y2], 1)], 1)  # (N, 4, 2)
    moved = apply_affine_points(matrix, corners)
    out = np.concatenate([moved.min(1), moved.max(1)], 1)
    out[:, 0::2] = out[:, 0::2].clip(0, width)
    out[:, 1::2] = out[:, 1::2].clip(0, height)
    return out.astype(np.float32)
