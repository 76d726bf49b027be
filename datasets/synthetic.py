"""Synthetic "shapes": ten classes of coloured geometric shapes, drawn with OpenCV.

Small, deterministic and learnable without downloads, for demos and smoke tests.
Each image has a noisy background and one shape at a random position, scale,
colour and small rotation (at most +-15 degrees, so that the bar, square/diamond
and cross/X pairs stay distinct classes).

>>> images, labels = make_shapes(100, size=32, seed=0)   # (100, 32, 32, 3) uint8, (100,) int64
"""
import os

import cv2
import numpy as np

SHAPE_NAMES = ("circle", "square", "triangle", "cross", "ring",
               "hbar", "vbar", "diamond", "x", "dots")
_MAX_ROTATION = 15.0          # degrees
_SUPERSAMPLE = 4              # the mask is drawn at 4x and area-averaged: anti-aliased edges


def _regular(n, radius=1.0, phase=0.0):
    angle = phase + np.arange(n) * 2 * np.pi / n
    return np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1)


def _rect(half_w, half_h):
    return np.array([[-half_w, -half_h], [half_w, -half_h], [half_w, half_h], [-half_w, half_h]])


def _rotated(points, degrees):
    t = np.deg2rad(degrees)
    rot = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    return points @ rot.T


def _shape_polygons(kind):
    """(filled polygons, hole polygons) in unit coordinates, y pointing down."""
    if kind == "circle":
        return [_regular(48, 0.9)], []
    if kind == "square":
        return [_rect(0.7, 0.7)], []
    if kind == "triangle":
        return [_regular(3, 1.0, -np.pi / 2)], []
    if kind == "cross":
        return [_rect(0.95, 0.22), _rect(0.22, 0.95)], []
    if kind == "ring":
        return [_regular(48, 0.95)], [_regular(48, 0.55)]
    if kind == "hbar":
        return [_rect(0.95, 0.25)], []
    if kind == "vbar":
        return [_rect(0.25, 0.95)], []
    if kind == "diamond":
        return [_regular(4, 1.0)], []
    if kind == "x":
        return [_rotated(_rect(0.95, 0.18), 45), _rotated(_rect(0.95, 0.18), -45)], []
    if kind == "dots":
        grid = [(x, y) for y in (-0.65, 0.0, 0.65) for x in (-0.65, 0.0, 0.65)]
        return [_regular(16, 0.2) + np.array(c) for c in grid], []
    raise ValueError(f"synthetic shapes: unknown shape kind {kind!r}; known: {SHAPE_NAMES}")


def _shape_mask(kind, size, center, radius, rotation):
    """float32 (size, size) coverage in [0, 1] of one transformed shape."""
    big = size * _SUPERSAMPLE
    mask = np.zeros((big, big), np.uint8)
    fills, holes = _shape_polygons(kind)

    def to_pixels(poly):
        pts = _rotated(poly, rotation) * radius + np.asarray(center)
        return np.round(pts * _SUPERSAMPLE).astype(np.int32)

    # One call per polygon: a single fillPoly call with overlapping polygons leaves the
    # overlap unfilled (even-odd rule), which would punch a hole in the cross and the X.
    for poly in fills:
        cv2.fillPoly(mask, [to_pixels(poly)], 255)
    for poly in holes:
        cv2.fillPoly(mask, [to_pixels(poly)], 0)
    small = cv2.resize(mask, (size, size), interpolation=cv2.INTER_AREA)
    return small.astype(np.float32) / 255.0


def _colours(rng):
    """A background and a foreground colour at least 80 grey levels apart."""
    while True:
        bg = rng.integers(0, 256, 3)
        fg = rng.integers(0, 256, 3)
        if abs(int(bg.mean()) - int(fg.mean())) >= 80:
            return bg.astype(np.float32), fg.astype(np.float32)


def _draw_one(kind, size, rng):
    radius = rng.uniform(0.24, 0.42) * size
    center = rng.uniform(radius, size - radius, 2)
    rotation = rng.uniform(-_MAX_ROTATION, _MAX_ROTATION)
    bg, fg = _colours(rng)
    mask = _shape_mask(kind, size, center, radius, rotation)[..., None]   # (H, W, 1)
    image = bg * (1.0 - mask) + fg * mask                                 # (H, W, 3)
    image += rng.normal(0.0, 12.0, image.shape)                           # background noise
    return np.clip(np.round(image), 0, 255).astype(np.uint8)


def make_shapes(num, size=32, num_classes=10, seed=0):
    """(images uint8 (num, size, size, 3) RGB, labels int64 (num,)), deterministic per seed.

    Labels are balanced (num // num_classes each, the remainder to the first classes)
    and shuffled; class `k` is `SHAPE_NAMES[k]`.
    """
    if not 1 <= num_classes <= len(SHAPE_NAMES):
        raise ValueError(f"make_shapes: num_classes must be in 1..{len(SHAPE_NAMES)}, "
                         f"got {num_classes}")
    if size < 8:
        raise ValueError(f"make_shapes: size must be >= 8 pixels, got {size}")
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(num) % num_classes).astype(np.int64)
    images = np.empty((num, size, size, 3), np.uint8)
    for i, label in enumerate(labels):
        images[i] = _draw_one(SHAPE_NAMES[label], size, rng)
    return images, labels


def class_folder_names(num_classes=10):
    """Folder names whose sorted order is the label order: '00_circle', '01_square', ..."""
    return [f"{k:02d}_{SHAPE_NAMES[k]}" for k in range(num_classes)]


def write_image_folder(root, num_per_class, size=32, seed=0, num_classes=10):
    """Write `root/<NN_name>/<i>.png` (an ImageFolder tree); returns the number of files.

    The folder names sort in label order, so `ImageFolder(root)` labels equal
    `make_shapes` labels.
    """
    images, labels = make_shapes(num_per_class * num_classes, size, num_classes, seed)
    names = class_folder_names(num_classes)
    counts = [0] * num_classes
    for image, label in zip(images, labels):
        folder = os.path.join(root, names[label])
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{counts[label]:05d}.png")
        if not cv2.imwrite(path, cv2.cvtColor(image, cv2.COLOR_RGB2BGR)):
            raise OSError(f"write_image_folder: could not write {path}")
        counts[label] += 1
    return len(labels)


class ShapesDataset:
    """The shapes as a dataset of item dicts {"image", "label", "info"}.

    Train and test draw from different seeds (2*seed and 2*seed+1), so they share no images.

    >>> ds = ShapesDataset(1000, train=True, seed=0); ds[0]["image"].shape
    (32, 32, 3)
    """

    def __init__(self, num, train=True, seed=0, size=32, num_classes=10, transform=None):
        split_seed = 2 * seed + (0 if train else 1)
        self.images, self.labels = make_shapes(num, size, num_classes, split_seed)
        self.classes = list(SHAPE_NAMES[:num_classes])
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        item = {"image": self.images[index], "label": int(self.labels[index]),
                "info": {"index": int(index), "file_name": f"shapes/{index}"}}
        return self.transform(item) if self.transform is not None else item
