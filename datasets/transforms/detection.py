"""Detection transforms: shortest-edge resize (flip and normalize are shared), and the
conversion to what the detectors take.

Two ways to feed a detector. The zoo's detectors take a list of unnormalised [0, 1] RGB
images of any size and resize, normalise and pad inside (torchvision's
GeneralizedRCNNTransform): the data only flips (and, for multi-scale training in the data,
resizes the shorter side); `model_images` turns a batch's uint8 HWC images into the float32
CHW list at the forward, so the loader moves uint8. A model that takes a padded tensor uses
`Normalize`, `ToCHW` and `collate.detection_collate` (padding to a multiple of 32).

>>> t = Compose([ShortestEdgeResize((640, 672, 704), 1333), RandomHorizontalFlip()])
>>> images = model_images(batch["image"])      # [(3, H, W) float32 in [0, 1]]  # doctest: +SKIP
"""
import numpy as np

from . import geometry
from .random import get_rng


def model_image(image):
    """(H, W, 3) uint8 RGB -> (3, H, W) float32 in [0, 1] (a float image is taken as 0..255)."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"model_image: expected an (H, W, 3) RGB image, got {image.shape}")
    return np.ascontiguousarray(image.transpose(2, 0, 1), dtype=np.float32) / np.float32(255)


def model_images(images):
    """A batch's images (a list, or an (N, H, W, 3) array) -> [(3, H, W) float32 in [0, 1]]."""
    return [model_image(image) for image in images]


class ShortestEdgeResize:
    """Shorter side to `min_size` (an int, or a tuple to choose from at random per item;
    with `sample_style="range"` a (low, high) range), longer side at most `max_size`."""

    def __init__(self, min_size, max_size=1333, sample_style="choice", interpolation="bilinear"):
        self.min_size = (min_size,) if isinstance(min_size, int) else tuple(min_size)
        if sample_style not in ("choice", "range"):
            raise ValueError(f"ShortestEdgeResize: sample_style must be 'choice' or 'range', "
                             f"got {sample_style!r}")
        if sample_style == "range" and len(self.min_size) != 2:
            raise ValueError(f"ShortestEdgeResize: a range needs (low, high), got {min_size}")
        self.max_size, self.sample_style = max_size, sample_style
        self.flag = geometry.interpolation_flag(interpolation)

    def target(self):
        if self.sample_style == "range":
            return int(get_rng().integers(self.min_size[0], self.min_size[1] + 1))
        if len(self.min_size) == 1:
            return self.min_size[0]
        return self.min_size[int(get_rng().integers(len(self.min_size)))]

    def __call__(self, item):
        h, w = geometry.image_size(item)
        short = self.target()
        scale = short / min(h, w)
        if self.max_size is not None and max(h, w) * scale > self.max_size:
            scale = self.max_size / max(h, w)
        new_h, new_w = max(1, int(h * scale + 0.5)), max(1, int(w * scale + 0.5))
        out = geometry.resize(item, new_h, new_w, interpolation=self.flag)
        info = dict(out.get("info") or {})
        info["scale_factor"] = (new_h / h, new_w / w)
        out["info"] = info
        return out
