"""Feature Pyramid Network (Lin et al., 1612.03144) with torchvision's module names
(torchvision.ops.feature_pyramid_network, version 2 of its state dict).

`inner_blocks.{i}.0` are the 1x1 lateral convs, `layer_blocks.{i}.0` the 3x3 output convs
(each in a Sequential of one, torchvision's Conv2dNormActivation without norm and
activation); the top-down path upsamples the coarser level to the finer one's size (nearest)
and adds the lateral. `LastLevelP6P7` appends P6 (3x3 stride-2 conv) and P7 (ReLU, 3x3
stride-2 conv) from P5 when its in_channels equal its out_channels (torchvision's
retinanet_resnet50_fpn, v1), else from C5 (the paper; torchvision's v2). The adds are
`nn.Add` modules and the ReLU a module, so the pyramid quantizes as the backbone does.
Published v1 files name the convs `inner_blocks.{i}.weight`: weights/detection_maps.py renames.

>>> import tianyuan as ty
>>> fpn = FeaturePyramidNetwork([16, 32], 8, LastLevelP6P7(8, 8))
>>> [tuple(p.shape) for p in fpn([ty.randn(1, 16, 8, 8), ty.randn(1, 32, 4, 4)])]
[(1, 8, 8, 8), (1, 8, 4, 4), (1, 8, 2, 2), (1, 8, 1, 1)]
"""
import tianyuan.functional as F
from tianyuan import nn


def _init_conv(conv):
    """torchvision's FPN init: kaiming-uniform with a = 1, bias 0."""
    nn.init.kaiming_uniform_(conv.weight, a=1)
    nn.init.zeros_(conv.bias)
    return conv


class FeaturePyramidNetwork(nn.Module):
    """Levels in (C_i channels, finest first) -> the same levels at `out_channels`, plus what
    `extra_blocks` appends."""

    def __init__(self, in_channels_list, out_channels, extra_blocks=None):
        super().__init__()
        self.inner_blocks = nn.ModuleList(
            [nn.Sequential(_init_conv(nn.Conv2d(c, out_channels, 1))) for c in in_channels_list])
        self.layer_blocks = nn.ModuleList(
            [nn.Sequential(_init_conv(nn.Conv2d(out_channels, out_channels, 3, padding=1)))
             for _ in in_channels_list])
        # lateral + upsampled top-down, finest level first (no state)
        self.top_down_adds = nn.ModuleList([nn.Add() for _ in in_channels_list[:-1]])
        self.extra_blocks = extra_blocks
        self.out_channels = out_channels

    def forward(self, features):
        """[(N, C_i, H_i, W_i)] finest first -> [(N, out_channels, H_i, W_i)] (+ extras)."""
        if len(features) != len(self.inner_blocks):
            raise ValueError(f"FeaturePyramidNetwork: {len(features)} feature levels, built "
                             f"for {len(self.inner_blocks)}")
        last = self.inner_blocks[-1](features[-1])
        results = [self.layer_blocks[-1](last)]
        for i in range(len(features) - 2, -1, -1):
            lateral = self.inner_blocks[i](features[i])
            top_down = F.interpolate(last, size=tuple(lateral.shape[-2:]), mode="nearest")
            last = self.top_down_adds[i](lateral, top_down)
            results.insert(0, self.layer_blocks[i](last))
        if self.extra_blocks is not None:
            results = self.extra_blocks(results, features)
        return results


class LastLevelP6P7(nn.Module):
    """P6 = conv3x3/2(P5 or C5), P7 = conv3x3/2(relu(P6)) (RetinaNet)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.p6 = _init_conv(nn.Conv2d(in_channels, out_channels, 3, 2, 1))
        self.p7 = _init_conv(nn.Conv2d(out_channels, out_channels, 3, 2, 1))
        self.relu = nn.ReLU()
        self.use_P5 = in_channels == out_channels

    def forward(self, results, features):
        p6 = self.p6(results[-1] if self.use_P5 else features[-1])
        return results + [p6, self.p7(self.relu(p6))]


class LastLevelMaxPool(nn.Module):
    """P6 = max_pool(P5, kernel 1, stride 2) (Faster R-CNN's extra level: the RPN's 512
    anchors; the RoI pooler leaves it out)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(1, 2, 0)      # a module: int8 after quantize, as is

    def forward(self, results, features):
        return results + [self.pool(results[-1])]


class BackboneWithFPN(nn.Module):
    """`body` (a zoo Backbone) and `fpn` over its `returned` stage features (torchvision's
    names: `backbone.body.*`, `backbone.fpn.*`). forward: image batch -> pyramid levels."""

    def __init__(self, body, returned=("C3", "C4", "C5"), out_channels=256, extra_blocks=None):
        super().__init__()
        self.body = body
        self.returned = tuple(returned)
        in_channels = [body.feature_channels[k] for k in self.returned]
        self.fpn = FeaturePyramidNetwork(in_channels, out_channels, extra_blocks)
        self.out_channels = out_channels

    def forward(self, x):
        features = self.body.forward_features(x)
        return self.fpn([features[k] for k in self.returned])

    def fuse_groups(self):
        return [[f"body.{name}" for name in group] for group in self.body.fuse_groups()]
