"""Transforms for classification (and shared ones): dict in, dict out.

>>> train = Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
...                  ColorJitter(0.4, 0.4, 0.4), Normalize(), ToCHW()])
>>> out = train({"image": np.zeros((300, 400, 3), np.uint8), "label": 3})
>>> out["image"].shape
(3, 224, 224)
"""
import math

import cv2
import numpy as np

from tianyuan.weights import preprocessing
from tianyuan.weights.preprocessing import pixel_values

from . import geometry
from .random import get_rng

# RGB, in the 0..255 scale Normalize works in (from tianyuan.weights.preprocessing's 0..1 ones)
IMAGENET_MEAN = pixel_values(preprocessing.IMAGENET_MEAN)    # (123.675, 116.28, 103.53)
IMAGENET_STD = pixel_values(preprocessing.IMAGENET_STD)      # (58.395, 57.12, 57.375)
# PCA of ImageNet RGB pixels in 0..1 scale (AlexNet's "lighting" noise, fb.resnet.torch)
IMAGENET_EIGVAL = (0.2175, 0.0188, 0.0045)
IMAGENET_EIGVEC = ((-0.5675, 0.7192, 0.4009),
                   (-0.5808, -0.0045, -0.8140),
                   (-0.5836, -0.6948, 0.4203))


def _pair(size):
    return (size, size) if isinstance(size, int) else tuple(size)


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, item):
        for transform in self.transforms:
            item = transform(item)
        return item

    def __repr__(self):
        return "Compose(" + ", ".join(repr(t) for t in self.transforms) + ")"


class Resize:
    """Shorter side to `size` (int; longer side capped at `max_size`), or exactly (h, w)."""

    def __init__(self, size, max_size=None, interpolation="bilinear"):
        self.size, self.max_size = size, max_size
        self.flag = geometry.interpolation_flag(interpolation)

    def __call__(self, item):
        h, w = geometry.image_size(item)
        if not isinstance(self.size, int):
            return geometry.resize(item, *self.size, interpolation=self.flag)
        scale = self.size / min(h, w)
        if self.max_size is not None:
            scale = min(scale, self.max_size / max(h, w))
        return geometry.resize(item, max(1, round(h * scale)), max(1, round(w * scale)),
                               interpolation=self.flag)


class CenterCrop:
    """The central (h, w) window (zero-padded first if the image is smaller)."""

    def __init__(self, size):
        self.size = _pair(size)

    def __call__(self, item):
        th, tw = self.size
        h, w = geometry.image_size(item)
        if h < th or w < tw:
            item = geometry.pad(item, max(h, th), max(w, tw))
            h, w = geometry.image_size(item)
        top, left = int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))
        return geometry.crop(item, top, left, th, tw)


class RandomResizedCrop:
    """A random area fraction `scale` and aspect ratio `ratio` window, resized to `size`
    (Szegedy et al. 2015's "Inception" crop)."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), interpolation="bilinear"):
        self.size, self.scale, self.ratio = _pair(size), scale, ratio
        self.flag = geometry.interpolation_flag(interpolation)

    def window(self, h, w, rng):
        area = h * w
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(*log_ratio))
            cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
            if 0 < cw <= w and 0 < ch <= h:
                return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
        # fallback: the largest centred window with the ratio clamped into range
        aspect = w / h
        if aspect < self.ratio[0]:
            cw, ch = w, int(round(w / self.ratio[0]))
        elif aspect > self.ratio[1]:
            ch, cw = h, int(round(h * self.ratio[1]))
        else:
            cw, ch = w, h
        return (h - ch) // 2, (w - cw) // 2, ch, cw

    def __call__(self, item):
        top, left, ch, cw = self.window(*geometry.image_size(item), get_rng())
        item = geometry.crop(item, top, left, ch, cw)
        return geometry.resize(item, *self.size, interpolation=self.flag)


class PadRandomCrop:
    """Zero-pad by `padding` pixels on every side, then crop `size` at a random place (the
    CIFAR recipe of He et al. 2016, section 4.2)."""

    def __init__(self, size, padding=4):
        self.size, self.padding = _pair(size), padding

    def __call__(self, item):
        p = self.padding
        item = geometry.pad_sides(item, p, p, p, p)          # (H+2p, W+2p, 3)
        h, w = geometry.image_size(item)
        th, tw = self.size
        rng = get_rng()
        top, left = rng.integers(0, h - th + 1), rng.integers(0, w - tw + 1)
        return geometry.crop(item, int(top), int(left), th, tw)


class RandomHorizontalFlip:
    """Mirror with probability `p`; keypoints swap `flip_pairs` (needed when present)."""

    def __init__(self, p=0.5, flip_pairs=None):
        self.p, self.flip_pairs = p, flip_pairs

    def __call__(self, item):
        if get_rng().random() < self.p:
            return geometry.hflip(item, self.flip_pairs)
        return item


def _grey(image):
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)


class ColorJitter:
    """Random brightness, contrast, saturation (factors in [1-x, 1+x]) and hue shift
    (fraction of a turn in [-hue, hue]), applied in random order on uint8 RGB."""

    def __init__(self, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0):
        if not 0 <= hue <= 0.5:
            raise ValueError(f"ColorJitter: hue must be in [0, 0.5], got {hue}")
        self.amounts = (brightness, contrast, saturation, hue)

    def __call__(self, item):
        rng = get_rng()
        image = item["image"]
        for op in rng.permutation(4):
            amount = self.amounts[op]
            if amount <= 0:
                continue
            if op == 3:
                image = _shift_hue(image, rng.uniform(-amount, amount))
                continue
            factor = rng.uniform(max(0.0, 1 - amount), 1 + amount)
            base = image.astype(np.float32)
            if op == 0:
                blended = base * factor
            elif op == 1:
                blended = base * factor + _grey(image).mean() * (1 - factor)
            else:
                blended = base * factor + _grey(image)[..., None] * (1 - factor)
            image = np.clip(blended + 0.5, 0, 255).astype(np.uint8)
        return {**item, "image": image}


def _shift_hue(image, turns):
    hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV)    # uint8 hue is in 0..179 (degrees / 2)
    hue = (hsv[..., 0].astype(np.int32) + int(round(turns * 180))) % 180
    hsv[..., 0] = hue.astype(np.uint8)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)


class Lighting:
    """PCA colour noise (Krizhevsky et al. 2012): adds eigvec @ (alpha * eigval) * 255,
    alpha ~ N(0, alphastd). Returns a float32 image (0..255 scale)."""

    def __init__(self, alphastd=0.1, eigval=IMAGENET_EIGVAL, eigvec=IMAGENET_EIGVEC):
        self.alphastd = alphastd
        self.eigval = np.asarray(eigval, np.float64)
        self.eigvec = np.asarray(eigvec, np.float64)

    def __call__(self, item):
        alpha = get_rng().normal(0.0, self.alphastd, 3)
        shift = (self.eigvec @ (alpha * self.eigval) * 255.0).astype(np.float32)   # (3,) RGB
        return {**item, "image": item["image"].astype(np.float32) + shift}


class Normalize:
    """(image - mean) / std per channel -> float32 HWC; mean/std in 0..255 scale."""

    def __init__(self, mean=IMAGENET_MEAN, std=IMAGENET_STD):
        self.mean = np.asarray(mean, np.float32)
        self.inv_std = 1.0 / np.asarray(std, np.float32)

    def __call__(self, item):
        image = (item["image"].astype(np.float32) - self.mean) * self.inv_std
        return {**item, "image": image}


class ToCHW:
    """HWC -> CHW (contiguous), the layout models take."""

    def __call__(self, item):
        return {**item, "image": np.ascontiguousarray(item["image"].transpose(2, 0, 1))}
