"""Detection transforms: shortest-edge resize (flip and normalize are shared).

Padding to a multiple of 32 happens in `collate.detection_collate`.

>>> t = Compose([ShortestEdgeResize((640, 672, 704), 1333), RandomHorizontalFlip(),
...              Normalize(), ToCHW()])      # doctest: +SKIP
"""
from . import geometry
from .random import get_rng


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
