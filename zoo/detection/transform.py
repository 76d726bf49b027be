"""torchvision's `GeneralizedRCNNTransform` (models/detection/transform.py): images in, one
padded normalised batch out; detections back to each image's own pixels.

Each (3, H, W) image in [0, 1] is normalised ((x - mean) / std, ImageNet's), resized so its
shorter side is `min_size` unless the longer side would pass `max_size` (scale = min(min_size
/ short, max_size / long); output floor(side * scale); bilinear, align_corners False, no
antialias), then the batch is zero-padded at the bottom and right to a multiple of
`size_divisible`. Training picks `min_size` at random from a tuple (multi-scale training).
Boxes scale by new / old size per axis (float32).

>>> t = GeneralizedRCNNTransform(min_size=64, max_size=100)
>>> batch, sizes, _ = t([np.zeros((3, 30, 40), np.float32), np.zeros((3, 50, 50), np.float32)])
>>> batch.shape, sizes
((2, 3, 64, 96), [(64, 85), (64, 64)])
"""
import math

import numpy as np

import tianyuan.functional as F
from tianyuan import nn
from tianyuan.random import rng
from tianyuan.tensor import Tensor
from tianyuan.weights.preprocessing import IMAGENET_MEAN, IMAGENET_STD


def resized_size(height, width, min_size, max_size):
    """(h, w) after torchvision's _resize_image_and_masks in eager mode: the scale in Python
    floats, each side floor(side * scale) (interpolate's recompute_scale_factor)."""
    scale = min(min_size / min(height, width), max_size / max(height, width))
    return int(math.floor(height * scale)), int(math.floor(width * scale))


def resize_boxes(boxes, original_size, new_size):
    """(N, 4) xyxy boxes from an image of `original_size` (h, w) to one of `new_size`."""
    ratio_h = np.float32(new_size[0]) / np.float32(original_size[0])
    ratio_w = np.float32(new_size[1]) / np.float32(original_size[1])
    ratios = np.array([ratio_w, ratio_h, ratio_w, ratio_h], np.float32)
    return (boxes.astype(np.float32, copy=False) * ratios).astype(np.float32, copy=False)


def _as_image(image, index):
    data = np.asarray(image.data if isinstance(image, Tensor) else image)
    if data.ndim != 3 or data.shape[0] != 3:
        raise ValueError(f"detection model: image {index} must be (3, H, W) RGB in [0, 1], got "
                         f"shape {data.shape}")
    return data.astype(np.float32, copy=False)


class GeneralizedRCNNTransform(nn.Module):
    """No state; `forward(images, targets)` -> (batch (N, 3, H, W) float32 array, resized
    sizes [(h, w)], resized targets or None)."""

    def __init__(self, min_size=800, max_size=1333, image_mean=IMAGENET_MEAN,
                 image_std=IMAGENET_STD, size_divisible=32):
        super().__init__()
        self.min_size = tuple(min_size) if isinstance(min_size, (list, tuple)) else (min_size,)
        self.max_size = max_size
        self.image_mean = np.asarray(image_mean, np.float32)[:, None, None]
        self.image_std = np.asarray(image_std, np.float32)[:, None, None]
        self.size_divisible = size_divisible

    def _min_size(self):
        if not self.training:
            return self.min_size[-1]
        return self.min_size[int(rng().integers(len(self.min_size)))]

    def resize(self, image, target=None):
        """One normalised (3, H, W) image (and its target) resized."""
        height, width = image.shape[-2:]
        size = resized_size(height, width, self._min_size(), self.max_size)
        out = F.interpolate(Tensor(image[None]), size=size, mode="bilinear",
                            align_corners=False).numpy()[0]
        if target is not None:
            target = dict(target, boxes=resize_boxes(np.asarray(target["boxes"]),
                                                     (height, width), size))
        return out, target

    def batch_images(self, images):
        """Zero-pad to the batch's largest size, rounded up to `size_divisible`."""
        stride = float(self.size_divisible)
        height = int(math.ceil(max(im.shape[1] for im in images) / stride) * stride)
        width = int(math.ceil(max(im.shape[2] for im in images) / stride) * stride)
        batch = np.zeros((len(images), 3, height, width), np.float32)
        for out, image in zip(batch, images):
            out[:, :image.shape[1], :image.shape[2]] = image
        return batch

    def forward(self, images, targets=None):
        if not isinstance(images, (list, tuple)) or not images:
            raise TypeError("detection model: images must be a non-empty list of (3, H, W) "
                            f"arrays or Tensors, got {type(images).__name__}")
        if targets is not None and len(targets) != len(images):
            raise ValueError(f"detection model: {len(images)} images but {len(targets)} targets")
        resized, sizes, new_targets = [], [], []
        for i, image in enumerate(images):
            image = (_as_image(image, i) - self.image_mean) / self.image_std
            image, target = self.resize(image, None if targets is None else targets[i])
            resized.append(image)
            sizes.append(tuple(image.shape[-2:]))
            new_targets.append(target)
        return self.batch_images(resized), sizes, None if targets is None else new_targets

    def postprocess(self, detections, image_sizes, original_sizes):
        """Each detection's boxes from its resized image back to its original one."""
        for det, size, original in zip(detections, image_sizes, original_sizes):
            det["boxes"] = resize_boxes(det["boxes"], size, original)
        return detections

    def extra_repr(self):
        return (f"min_size={self.min_size}, max_size={self.max_size}, "
                f"size_divisible={self.size_divisible}")
