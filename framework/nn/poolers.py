"""RoI poolers (torchvision.ops.RoIAlign and MultiScaleRoIAlign): no state; each forward is
one call into F (functional/roi.py)."""
from .. import functional as F
from .module import Module


class RoIAlign(Module):
    def __init__(self, output_size, spatial_scale, sampling_ratio, aligned=False):
        super().__init__()
        self.output_size, self.spatial_scale = output_size, spatial_scale
        self.sampling_ratio, self.aligned = sampling_ratio, aligned

    def forward(self, x, boxes):
        return F.roi_align(x, boxes, self.output_size, self.spatial_scale, self.sampling_ratio,
                           self.aligned)

    def extra_repr(self):
        return (f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned}")


class MultiScaleRoIAlign(Module):
    """Pools each box from the FPN level of its size. `featmap_names` pick the levels from the
    list of features the forward gets: torchvision's names "0", "1", ... are list indices
    (the FPN's finest level is "0"; its max-pooled extra level is left out)."""

    def __init__(self, featmap_names, output_size, sampling_ratio, canonical_scale=224,
                 canonical_level=4):
        super().__init__()
        try:
            self.featmap_names = [int(name) for name in featmap_names]
        except (TypeError, ValueError):
            raise ValueError(f"MultiScaleRoIAlign: featmap_names must be level indices such as "
                             f"['0', '1', '2', '3'], got {featmap_names!r}") from None
        self.output_size, self.sampling_ratio = output_size, sampling_ratio
        self.canonical_scale, self.canonical_level = canonical_scale, canonical_level

    def forward(self, features, boxes, image_shapes):
        """features: the levels (a list), boxes: a (K_i, 4) array per image, image_shapes: the
        images' (h, w) before padding -> (sum K_i, C, ph, pw)."""
        if max(self.featmap_names) >= len(features):
            raise ValueError(f"MultiScaleRoIAlign: featmap_names {self.featmap_names} name "
                             f"levels beyond the {len(features)} given")
        chosen = [features[k] for k in self.featmap_names]
        return F.multi_scale_roi_align(chosen, boxes, image_shapes, self.output_size,
                                       self.sampling_ratio, self.canonical_scale,
                                       self.canonical_level)

    def extra_repr(self):
        return (f"featmap_names={[str(k) for k in self.featmap_names]}, "
                f"output_size={self.output_size}, sampling_ratio={self.sampling_ratio}")
