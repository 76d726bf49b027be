"""RoIAlign primitives, native (framework/csrc/roi_align/; numpy twin roi_align_ref.py):
single-level with its input gradient, and the multi-scale pooler's gather over FPN levels
(each RoI pooled from the level chosen for it) as one Function, so that its backward
scatters into every level without a generic index op's accumulation."""
import numpy as np

from .. import _C
from ..autograd import Function


class RoIAlign(Function):
    """(R, C, ph, pw) from x (N, C, H, W) at `rois` (R, 5) numpy; the rois get no gradient."""

    def forward(self, x, rois=None, output_size=(7, 7), spatial_scale=1.0, sampling_ratio=-1,
                aligned=False):
        self.shape, self.rois = x.shape, rois
        self.args = (float(spatial_scale), int(sampling_ratio), bool(aligned))
        return _C.roi_align(x, rois, tuple(output_size), *self.args)

    def backward(self, g):
        return _C.roi_align_backward(np.ascontiguousarray(g), self.rois, self.shape, *self.args)


class MultiScaleRoIAlign(Function):
    """RoI r pooled from features[levels[r]] at scales[levels[r]] (aligned False, as
    torchvision's MultiScaleRoIAlign): (R, C, ph, pw) in the rois' order."""

    def forward(self, *features, rois=None, levels=None, scales=(), output_size=(7, 7),
                sampling_ratio=-1):
        self.shapes, self.rois, self.scales = [f.shape for f in features], rois, scales
        self.sampling_ratio = int(sampling_ratio)
        self.members = [np.flatnonzero(levels == k) for k in range(len(features))]
        c = features[0].shape[1]
        out = np.zeros((rois.shape[0], c) + tuple(output_size), features[0].dtype)
        for feature, scale, idx in zip(features, scales, self.members):
            if idx.size:
                out[idx] = _C.roi_align(feature, rois[idx], tuple(output_size), float(scale),
                                        self.sampling_ratio, False)
        return out

    def backward(self, g):
        grads = []
        for shape, scale, idx in zip(self.shapes, self.scales, self.members):
            if idx.size:
                grads.append(_C.roi_align_backward(np.ascontiguousarray(g[idx]), self.rois[idx],
                                                   shape, float(scale), self.sampling_ratio,
                                                   False))
            else:
                grads.append(np.zeros(shape, g.dtype))
        return tuple(grads)
