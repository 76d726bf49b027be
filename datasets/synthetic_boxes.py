"""Synthetic detection data: coloured shapes with their boxes, written as a COCO-format folder.

The shapes of `synthetic.py` (circle, square, triangle, ...), one to `max_objects` an image
on a noisy background, each in its own colour, none overlapping another's box; some images
have none (negatives). Boxes are the extents of the drawn polygons. Deterministic by seed,
small and learnable on a CPU: the `smoke_detection` experiment trains on it.

>>> samples = make_shape_boxes(4, size=96, num_classes=3, seed=0)
>>> image, boxes, labels = samples[0]      # (96, 96, 3) uint8, (N, 4) xyxy float32, (N,) int64
>>> ann_file = write_coco_shapes("data/shapes_det/val", 50, size=96)     # doctest: +SKIP
>>> ds = CocoFormat("data/shapes_det/val/images", ann_file)             # doctest: +SKIP
"""
import json
import os

import cv2
import numpy as np

from .synthetic import _MAX_ROTATION, SHAPE_NAMES, _rotated, _shape_mask, _shape_polygons

_NOISE = 12.0          # grey levels of background noise
_CONTRAST = 80         # the least difference of mean grey between a shape and the background


def _box(kind, center, radius, rotation, size):
    """The xyxy extent of a shape's polygons (continuous coordinates), clipped to the image."""
    fills, _ = _shape_polygons(kind)
    points = np.concatenate([_rotated(p, rotation) for p in fills]) * radius + center
    low, high = points.min(0).clip(0, size), points.max(0).clip(0, size)
    return np.array([low[0], low[1], high[0], high[1]], np.float32)


def _overlaps(box, boxes, margin):
    return any(box[0] < b[2] + margin and b[0] < box[2] + margin and
               box[1] < b[3] + margin and b[1] < box[3] + margin for b in boxes)


def _foreground(rng, background):
    while True:
        colour = rng.integers(0, 256, 3).astype(np.float32)
        if abs(colour.mean() - background.mean()) >= _CONTRAST:
            return colour


def _place(rng, size, count, radii, num_classes):
    """[(kind, center, radius, rotation, box)] of up to `count` shapes whose boxes keep apart."""
    placed = []
    for _ in range(count):
        for _attempt in range(30):
            radius = rng.uniform(*radii) * size
            center = rng.uniform(radius, size - radius, 2)
            rotation = rng.uniform(-_MAX_ROTATION, _MAX_ROTATION)
            label = int(rng.integers(num_classes))
            box = _box(SHAPE_NAMES[label], center, radius, rotation, size)
            if not _overlaps(box, [p[4] for p in placed], margin=2):
                placed.append((label, center, radius, rotation, box))
                break
    return placed


def draw_shape_boxes(rng, size=128, num_classes=3, max_objects=3, radii=(0.15, 0.3),
                     empty_fraction=0.05):
    """One image (size, size, 3) uint8 RGB with its boxes (N, 4) float32 xyxy and labels
    (N,) int64 (class k is SHAPE_NAMES[k]), drawn from `rng`."""
    background = rng.integers(0, 256, 3).astype(np.float32)
    count = 0 if rng.random() < empty_fraction else int(rng.integers(1, max_objects + 1))
    image = np.broadcast_to(background, (size, size, 3)).copy()
    boxes, labels = [], []
    for label, center, radius, rotation, box in _place(rng, size, count, radii, num_classes):
        mask = _shape_mask(SHAPE_NAMES[label], size, center, radius, rotation)[..., None]
        image = image * (1.0 - mask) + _foreground(rng, background) * mask     # (H, W, 3)
        boxes.append(box)
        labels.append(label)
    image += rng.normal(0.0, _NOISE, image.shape)
    image = np.clip(np.round(image), 0, 255).astype(np.uint8)
    return (image, np.array(boxes, np.float32).reshape(-1, 4), np.array(labels, np.int64))


def make_shape_boxes(num, size=128, num_classes=3, seed=0, **kwargs):
    """[(image, boxes, labels)] of `num` images, deterministic per seed (draw_shape_boxes)."""
    if not 1 <= num_classes <= len(SHAPE_NAMES):
        raise ValueError(f"make_shape_boxes: num_classes must be in 1..{len(SHAPE_NAMES)}, "
                         f"got {num_classes}")
    if size < 32:
        raise ValueError(f"make_shape_boxes: size must be >= 32 pixels, got {size}")
    rng = np.random.default_rng(seed)
    return [draw_shape_boxes(rng, size, num_classes, **kwargs) for _ in range(num)]


def save_coco_folder(root, images, annotations, categories, description):
    """Write each (H, W, 3) uint8 RGB image of `images` as `root/images/<000000>.png` (image
    ids 1..n) and `root/annotations.json` with `annotations` (dicts without "id": numbered
    1..) and `categories`; returns the json's path. The generated datasets' one writer."""
    images_dir = os.path.join(root, "images")
    os.makedirs(images_dir, exist_ok=True)
    entries = []
    for index, image in enumerate(images):
        name = f"{index:06d}.png"
        path = os.path.join(images_dir, name)
        if not cv2.imwrite(path, cv2.cvtColor(image, cv2.COLOR_RGB2BGR)):
            raise OSError(f"save_coco_folder: could not write {path}")
        entries.append({"id": index + 1, "file_name": name, "height": image.shape[0],
                        "width": image.shape[1]})
    annotations = [{"id": n + 1, **ann} for n, ann in enumerate(annotations)]
    ann_file = os.path.join(root, "annotations.json")
    with open(ann_file, "w") as handle:
        json.dump({"info": {"description": description}, "licenses": [], "images": entries,
                   "annotations": annotations, "categories": categories}, handle)
    return ann_file


def write_coco_shapes(root, num, size=128, num_classes=3, seed=0, **kwargs):
    """Write `root/images/<000000>.png` and `root/annotations.json` (COCO format, category
    ids 1..C named after the shapes, image ids 1..num); returns the json's path."""
    samples = make_shape_boxes(num, size, num_classes, seed, **kwargs)
    annotations = []
    for index, (_, boxes, labels) in enumerate(samples):
        for box, label in zip(boxes.tolist(), labels.tolist()):
            width, height = box[2] - box[0], box[3] - box[1]
            annotations.append({"image_id": index + 1, "category_id": label + 1, "iscrowd": 0,
                                "bbox": [box[0], box[1], width, height],
                                "area": width * height})
    categories = [{"id": k + 1, "name": SHAPE_NAMES[k], "supercategory": "shape"}
                  for k in range(num_classes)]
    return save_coco_folder(root, [image for image, _, _ in samples], annotations, categories,
                            "tianyuan synthetic shapes")
