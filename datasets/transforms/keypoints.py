"""Top-down keypoint transforms: half-body, person crop by box (scale/rotation affine),
heatmap targets. Items hold one person: boxes (1, 4), keypoints (1, K, 3).

Typical train pipeline (Xiao et al. 2018 "Simple Baselines"; Sun et al. 2019 HRNet):

>>> t = Compose([RandomHorizontalFlip(flip_pairs=COCO_FLIP_PAIRS), HalfBody(0.3),
...              TopDownAffine((192, 256), scale_factor=0.35, rotation_factor=45),
...              HeatmapTarget((48, 64), sigma=2), Normalize(), ToCHW()])   # doctest: +SKIP
"""
import math

import cv2
import numpy as np

from . import geometry
from .random import get_rng

COCO_UPPER_BODY = tuple(range(11))   # nose, eyes, ears, shoulders, elbows, wrists
COCO_LOWER_BODY = tuple(range(11, 17))


def _one_person(item, owner):
    points = item.get("keypoints")
    if points is None or points.shape[0] != 1 or item["boxes"].shape[0] != 1:
        raise ValueError(f"{owner}: expects one person per item (boxes (1, 4), keypoints "
                         f"(1, K, 3)); got boxes {item['boxes'].shape} and keypoints "
                         f"{None if points is None else points.shape}; use per_instance=True")
    return points[0]


class HalfBody:
    """With probability `prob`, when more than `min_joints` points are labelled, replace the
    box by one around the upper or lower body's labelled points, enlarged `expand` times."""

    def __init__(self, prob=0.3, min_joints=8, upper=COCO_UPPER_BODY, lower=COCO_LOWER_BODY,
                 expand=1.5):
        self.prob, self.min_joints, self.expand = prob, min_joints, expand
        self.upper, self.lower = list(upper), list(lower)

    def __call__(self, item):
        points = _one_person(item, "HalfBody")
        visible = points[:, 2] > 0
        rng = get_rng()
        if visible.sum() <= self.min_joints or rng.random() >= self.prob:
            return item
        upper = [j for j in self.upper if visible[j]]
        lower = [j for j in self.lower if visible[j]]
        chosen = upper if (rng.random() < 0.5 and len(upper) > 2) or len(lower) < 2 else lower
        if len(chosen) < 2:
            return item
        xy = points[chosen, :2]
        centre = (xy.min(0) + xy.max(0)) / 2
        half = (xy.max(0) - xy.min(0)) / 2 * self.expand
        box = np.concatenate([centre - half, centre + half]).astype(np.float32)[None]
        return {**item, "boxes": box}


def box_to_centre_scale(box, aspect, padding):
    """(centre (2,), size (2,) = (w, h)) of `box` grown to aspect w/h `aspect`, times `padding`."""
    x1, y1, x2, y2 = [float(v) for v in box]
    w, h = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
    if w > aspect * h:
        h = w / aspect
    else:
        w = h * aspect
    return np.array([(x1 + x2) / 2, (y1 + y2) / 2]), np.array([w, h]) * padding


def crop_matrix(centre, size, rotation, out_w, out_h):
    """2x3 continuous affine: the `size` window around `centre`, rotated by `rotation` degrees
    (counter-clockwise on screen), onto an out_w x out_h image."""
    theta = math.radians(rotation)
    cos, sin = math.cos(theta), math.sin(theta)
    sx, sy = out_w / size[0], out_h / size[1]
    # translate centre to origin, rotate (y axis points down), scale, move to output centre
    rot = np.array([[cos, sin], [-sin, cos]])
    linear = np.diag([sx, sy]) @ rot
    offset = np.array([out_w / 2, out_h / 2]) - linear @ centre
    return np.hstack([linear, offset[:, None]])


class TopDownAffine:
    """Crop the person box (grown to the output aspect, times `padding`) to `output_size`
    (w, h). In training the box is scaled by s ~ clip(1 + N(0, scale_factor), 1 +- sf) and
    rotated by r ~ clip(N(0, rotation_factor), +-2 rf) with probability `rotation_prob`.
    info["crop_matrix"] is the 2x3 continuous map original -> crop (invert it to map
    predictions back)."""

    def __init__(self, output_size=(192, 256), scale_factor=0.35, rotation_factor=45,
                 rotation_prob=0.6, padding=1.25, train=True):
        self.out_w, self.out_h = output_size
        self.scale_factor, self.rotation_factor = scale_factor, rotation_factor
        self.rotation_prob, self.padding, self.train = rotation_prob, padding, train

    def sample(self):
        if not self.train:
            return 1.0, 0.0
        rng = get_rng()
        sf, rf = self.scale_factor, self.rotation_factor
        scale = float(np.clip(rng.normal() * sf + 1, 1 - sf, 1 + sf))
        rotate = rng.random() < self.rotation_prob
        rotation = float(np.clip(rng.normal() * rf, -2 * rf, 2 * rf)) if rotate else 0.0
        return scale, rotation

    def __call__(self, item):
        _one_person(item, "TopDownAffine")
        centre, size = box_to_centre_scale(item["boxes"][0], self.out_w / self.out_h,
                                           self.padding)
        scale, rotation = self.sample()
        matrix = crop_matrix(centre, size * scale, rotation, self.out_w, self.out_h)
        out = geometry.warp_affine(item, matrix, self.out_h, self.out_w)
        info = dict(out.get("info") or {})
        info.update(crop_matrix=matrix, centre=centre, box_size=size * scale, rotation=rotation)
        out["info"] = info
        return out


def _gaussian_maps(xy, shape, sigma):
    """(K, H, W) unnormalised Gaussians (peak 1) centred at pixel-index positions xy (K, 2)."""
    h, w = shape
    ys, xs = np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32)
    gx = np.exp(-((xs[None] - xy[:, :1]) ** 2) / (2 * sigma ** 2))      # (K, W)
    gy = np.exp(-((ys[None] - xy[:, 1:]) ** 2) / (2 * sigma ** 2))      # (K, H)
    return (gy[:, :, None] * gx[:, None, :]).astype(np.float32)


def _blurred_maps(xy, shape, kernel):
    """(K, H, W): a one-hot at the rounded position blurred by a `kernel`-wide Gaussian, peak 1
    (the per-stage targets of MSPN/RSN)."""
    maps = np.zeros((len(xy),) + tuple(shape), np.float32)
    for k, (x, y) in enumerate(np.round(xy).astype(int)):
        if 0 <= x < shape[1] and 0 <= y < shape[0]:
            maps[k, y, x] = 1.0
            maps[k] = cv2.GaussianBlur(maps[k], (kernel, kernel), 0)
            maps[k] /= maps[k].max()
    return maps


class HeatmapTarget:
    """Adds "heatmaps" (K, H, W) -- or (S, K, H, W) when `sigma` or `kernel` is a list, one
    per stage -- and "target_weight" (K,): 1 for labelled points inside the heatmap.
    `heatmap_size` is (w, h); the image is the cropped input, so the stride is its size
    over the heatmap size. Gaussians are exact at sub-pixel centres unless `kernel` is set."""

    def __init__(self, heatmap_size=(48, 64), sigma=2.0, kernel=None):
        self.hw, self.hh = heatmap_size
        self.sigma, self.kernel = sigma, kernel

    def __call__(self, item):
        points = _one_person(item, "HeatmapTarget")
        h, w = geometry.image_size(item)
        # continuous image coords -> continuous heatmap coords -> pixel-centre indices
        xy = points[:, :2] * np.array([self.hw / w, self.hh / h], np.float32) - 0.5
        inside = (xy[:, 0] >= -0.5) & (xy[:, 0] < self.hw - 0.5) & \
                 (xy[:, 1] >= -0.5) & (xy[:, 1] < self.hh - 0.5)
        weight = ((points[:, 2] > 0) & inside).astype(np.float32)
        stages = self.kernel if self.kernel is not None else self.sigma
        many = isinstance(stages, (list, tuple))
        maps = [self._maps(xy, s) * weight[:, None, None] for s in (stages if many else [stages])]
        heatmaps = np.stack(maps) if many else maps[0]
        return {**item, "heatmaps": heatmaps, "target_weight": weight}

    def _maps(self, xy, value):
        if self.kernel is not None:
            return _blurred_maps(xy, (self.hh, self.hw), int(value))
        return _gaussian_maps(xy, (self.hh, self.hw), float(value))
