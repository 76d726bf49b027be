"""MSPN (Li et al., "Rethinking on Multi-Stage Networks for Human Pose Estimation",
1901.00148): a stem, then stages of a ResNet-like downsampling unit and an upsampling unit;
each stage predicts heatmaps at four scales (coarse to fine, each resized to the finest)
and hands its finest features to the next stage.

Module names are MegEngine Models' (official/vision/keypoints/models/mspn.py), so that its
`mspn_4stage_0_255_75_2.pkl` loads by name:

    head.{0,1,3,4,6,7}                 stem: 3x3/2, 3x3, 3x3/2 convs (biased) + BN (+ ReLU)
    stages.Stage_{i}_body.down.layer1-4   bottleneck stages (widths `channels`, x4 out)
    stages.Stage_{i}_body.up{1-4}      1x1 conv + BN of each level's features to mid_channel
    stages.Stage_{i}_body.deconv{1-3}  ConvTranspose2d(4, 2, 1) + BN: a level up
    stages.Stage_{i}_tail.tail_{j}     3x3 conv to K heatmaps at scale j (coarse to fine)
    stages.Stage_{i}_next              1x1 conv + BN + ReLU: the next stage's input

MegEngine's network leaves out the paper's cross-stage feature aggregation; `cross_stage=True`
adds it (sec. 3.2; the official MSPN's skip1/skip2): each level of a stage's downsampling
unit also receives 1x1 conv + BN + ReLU projections of the previous stage's downsampling and
upsampling features at that level (`Stage_{i}_body.skip_down.{l}`, `.skip_up.{l}`, in the
stages that give them). The official release (megvii-research/MSPN: a 7x7 stem and res_conv
heads) is another network and does not convert to this one.

>>> import tianyuan as ty
>>> from tianyuan.zoo import mspn_small
>>> mspn_small(num_joints=5)(ty.randn(1, 3, 64, 96)).shape
(1, 5, 16, 24)
"""
from functools import partial

import tianyuan.functional as F
from tianyuan import nn
from tianyuan import quantization as Q

from ..classification.common import kaiming_init
from ..classification.resnet import Bottleneck, ResNetBackbone
from ..registry import register_model
from .common import (HeatmapRange, fusible, head_init, keypoint_card, load_pose_weights,
                     seq_conv_groups)
from .losses import mspn_loss

# MegEngine's coarse-to-fine kernels (config.heat_kernel), coarse to fine, at 64x48 heatmaps
MSPN_SIGMAS = (2.6, 2.0, 1.7, 1.4)


def _conv_bn(in_ch, out_ch, kernel=1, stride=1, relu=False):
    layers = [nn.Conv2d(in_ch, out_ch, kernel, stride, kernel // 2), nn.BatchNorm2d(out_ch)]
    return nn.Sequential(*(layers + [nn.ReLU()] if relu else layers))


class DownUnit(nn.Module):
    """Four bottleneck stages (`layer1-4`, strides 1, 2, 2, 2) from the stem's 64 channels;
    with `skips` each level's output adds the previous stage's projections."""

    def __init__(self, layers, channels, in_ch=64, skips=False):
        super().__init__()
        self.out_channels = []
        for i, (n, width) in enumerate(zip(layers, channels), start=1):
            stage, in_ch = ResNetBackbone._make_layer(Bottleneck, in_ch, width, n,
                                                      1 if i == 1 else 2)
            setattr(self, f"layer{i}", stage)
            self.out_channels.append(in_ch)
        self.skips = skips
        if skips:
            self.add_down = nn.ModuleList([nn.Add() for _ in range(4)])
            self.add_up = nn.ModuleList([nn.Add() for _ in range(4)])

    def forward(self, x, skip_down=None, skip_up=None):
        """[layer1 .. layer4 outputs], fine to coarse."""
        outputs = []
        for i in range(4):
            x = getattr(self, f"layer{i + 1}")(x)
            if self.skips and skip_down is not None:
                x = self.add_up[i](self.add_down[i](x, skip_down[i]), skip_up[i])
            outputs.append(x)
        return outputs


class SingleStage(nn.Module):
    """A downsampling unit and an upsampling unit: four levels of mid_channel features,
    coarse to fine. `gives_skips`: projections of both for the next stage (cross_stage)."""

    def __init__(self, layers, channels, mid_channel, in_ch=64, takes_skips=False,
                 gives_skips=False):
        super().__init__()
        self.down = DownUnit(layers, channels, in_ch, skips=takes_skips)
        widths = self.down.out_channels[::-1]                  # coarse to fine
        for j, width in enumerate(widths, start=1):
            setattr(self, f"up{j}", _conv_bn(width, mid_channel))
            if j < 4:
                setattr(self, f"deconv{j}", nn.Sequential(
                    nn.ConvTranspose2d(mid_channel, mid_channel, 4, 2, 1),
                    nn.BatchNorm2d(mid_channel)))
        self.relu = nn.ReLU()
        self.add_relu = nn.ModuleList([nn.AddReLU() for _ in range(3)])
        self.gives_skips = gives_skips
        if gives_skips:      # fine to coarse, as the down unit's levels
            fine = self.down.out_channels
            self.skip_down = nn.ModuleList([_conv_bn(c, c, relu=True) for c in fine])
            self.skip_up = nn.ModuleList([_conv_bn(mid_channel, c, relu=True) for c in fine])

    def forward(self, x, skip_down=None, skip_up=None):
        """(features coarse to fine, (down skips, up skips) for the next stage or None)."""
        down = self.down(x, skip_down, skip_up)[::-1]           # coarse to fine
        f = self.relu(self.up1(down[0]))
        outputs = [f]
        for j in range(1, 4):
            lateral = getattr(self, f"up{j + 1}")(down[j])
            f = self.add_relu[j - 1](getattr(self, f"deconv{j}")(f), lateral)
            outputs.append(f)
        if not self.gives_skips:
            return outputs, None
        fine_down, fine_up = down[::-1], outputs[::-1]
        skips = ([m(d) for m, d in zip(self.skip_down, fine_down)],
                 [m(u) for m, u in zip(self.skip_up, fine_up)])
        return outputs, skips

    def fuse_groups(self, prefix):
        groups = []
        for name, module in self.named_modules():
            if isinstance(module, nn.Sequential) and not name.startswith("down."):
                groups += seq_conv_groups(f"{prefix}.{name}", module)
        for i in range(1, 5):
            for j, block in enumerate(getattr(self.down, f"layer{i}")):
                groups += block.fuse_groups(f"{prefix}.down.layer{i}.{j}")
        return groups


class MSPN(HeatmapRange, nn.Module):
    """The stem (`head`), `num_stages` stages (`stages` as MegEngine names them), heatmaps
    resized to the finest scale (a quarter of the input). `sigmas`: the coarse-to-fine
    kernels the loss renders for the four scales (None: all learn the data's target);
    `topk`: the joints OHKM keeps (None: half of them, 8 of COCO's 17 as both references)."""

    def __init__(self, layers, channels, num_stages, mid_channel=256, num_joints=17,
                 stem_channels=64, cross_stage=False, sigmas=MSPN_SIGMAS, topk=None,
                 heatmap_range=1.0):
        super().__init__()
        self.num_joints, self.num_stages = int(num_joints), int(num_stages)
        self.sigmas = tuple(sigmas) if sigmas else None
        self.topk = int(topk) if topk else max(1, self.num_joints // 2)   # 8 of COCO's 17
        self.heatmap_range = float(heatmap_range)
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        c = stem_channels
        self.head = nn.Sequential(*_conv_bn(3, c, 3, 2, relu=True), *_conv_bn(c, c, 3, 1, True),
                                  *_conv_bn(c, c, 3, 2, True))
        stages = {}
        for i in range(self.num_stages):
            last = i == self.num_stages - 1
            stages[f"Stage_{i}_body"] = SingleStage(layers, channels, mid_channel, c,
                                                    cross_stage and i > 0,
                                                    cross_stage and not last)
            stages[f"Stage_{i}_tail"] = nn.ModuleDict(
                {f"tail_{j}": nn.Conv2d(mid_channel, self.num_joints, 3, 1, 1) for j in range(4)})
            if not last:
                stages[f"Stage_{i}_next"] = _conv_bn(mid_channel, c, relu=True)
        self.stages = nn.ModuleDict(stages)
        for i in range(self.num_stages):   # heads that only feed the losses stay float: never
            for j in range(4):             # run in inference, they are never calibrated
                if i < self.num_stages - 1 or j < 3:
                    Q.disable_quantize(self.stages[f"Stage_{i}_tail"][f"tail_{j}"])
        kaiming_init(self)
        for i in range(self.num_stages):
            head_init(self.stages[f"Stage_{i}_tail"])

    def forward_stages(self, x, finest_only=False):
        """[[four (N, K, H/4, W/4) heatmaps, coarse to fine] per stage]; finest_only: the last
        stage's finest alone (inference: the other heads only feed the losses), as [[map]]."""
        f = self.head(self.quant(x))
        skips, outputs = (None, None), []
        for i in range(self.num_stages):
            features, given = self.stages[f"Stage_{i}_body"](f, *skips)
            tail = self.stages[f"Stage_{i}_tail"]
            maps = []
            for j in range(4):
                if finest_only and (i < self.num_stages - 1 or j < 3):
                    continue
                out = tail[f"tail_{j}"](features[j])
                if j < 3:      # to the finest scale (MegEngine: bilinear, half-pixel centres)
                    out = F.interpolate(out, size=features[3].shape[2:], mode="bilinear")
                maps.append(self.dequant(out) if i == self.num_stages - 1 and j == 3 else out)
            outputs.append(maps)
            if i < self.num_stages - 1:
                f = self.stages[f"Stage_{i}_next"](features[3])
                skips = given or (None, None)
        return outputs

    def forward(self, x):
        """(N, 3, H, W) -> the last stage's finest (N, K, H / 4, W / 4) heatmaps."""
        out = self.forward_stages(x, finest_only=True)[-1][-1]
        return self.unscaled(out)

    def losses(self, images, target, target_weight):
        """{"loss_coarse", "loss_ohkm"}: every stage's coarse scales, OHKM on the finest."""
        return mspn_loss(self.forward_stages(images), target, target_weight, self.sigmas,
                         self.topk)

    def fuse_groups(self):
        groups = seq_conv_groups("head", self.head)
        for i in range(self.num_stages):
            groups += self.stages[f"Stage_{i}_body"].fuse_groups(f"stages.Stage_{i}_body")
            if i < self.num_stages - 1:
                groups += seq_conv_groups(f"stages.Stage_{i}_next",
                                          self.stages[f"Stage_{i}_next"])
        return fusible(self, groups)


def _mspn(arch, *, layers, channels, num_stages, mid_channel=256, num_joints=17,
          stem_channels=64, cross_stage=False, sigmas=MSPN_SIGMAS, topk=None,
          heatmap_range=1.0,
          weights=None, pretrained=False):
    model = MSPN(layers, channels, num_stages, mid_channel, num_joints, stem_channels,
                 cross_stage, sigmas, topk, heatmap_range)
    return load_pose_weights(model, arch, weights, pretrained)


# MegEngine's mspn_4stage: ResNet-50-like units of [5, 5, 6, 3] bottlenecks at widths
# 64/128/192/384 (x4 out), 256 upsampling channels
MEGENGINE_UNIT = {"layers": [5, 5, 6, 3], "channels": [64, 128, 192, 384]}


def _register(arch, **defaults):
    return register_model(arch, partial(_mspn, arch, **defaults), keypoint_card())


mspn_2stage = _register("mspn_2stage", num_stages=2, **MEGENGINE_UNIT)
mspn_4stage = _register("mspn_4stage", num_stages=4, **MEGENGINE_UNIT)
# the smoke model: two stages of one bottleneck per level, 64 channels up, with the paper's
# cross-stage aggregation
mspn_small = _register("mspn_small", num_stages=2, layers=[1, 1, 1, 1],
                       channels=[16, 32, 48, 64], mid_channel=64, stem_channels=32,
                       cross_stage=True)
