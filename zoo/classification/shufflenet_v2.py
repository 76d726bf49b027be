"""ShuffleNet V2 (Ma et al., 1807.11164) with torchvision's names.

`conv1.{0,1,2}` stem, `stage{2,3,4}.{i}` units, `conv5.{0,1,2}`, `fc`. A stride-2 unit runs
`branch1` (dw 3x3, BN, 1x1, BN, ReLU) and `branch2` (1x1, BN, ReLU, dw 3x3, BN, 1x1, BN,
ReLU) on the whole input; a stride-1 unit splits the channels in half and runs `branch2`
on the second half. Both concat (`cat`, nn.Concat) and shuffle the two halves.
`ShuffleNetV2Backbone` is the network less its head: C2 the stem's max-pool output, C3-C4
stage2-3's, C5 conv5's.

>>> import tianyuan as ty
>>> from tianyuan.zoo import shufflenet_v2_x0_5
>>> shufflenet_v2_x0_5(num_classes=10)(ty.randn(1, 3, 64, 64)).shape
(1, 10)
"""
from functools import partial

from tianyuan import functional as F
from tianyuan import nn

from ..backbones import FEATURES, Backbone, load_backbone_weights, register_backbone
from ..registry import classification_card, register_model
from .common import Classifier, conv_bn_act, load_into, seq_groups

STAGE_REPEATS = [4, 8, 4]
# arch -> output widths of stage2-4 and conv5 (the paper's table 5)
STAGE_WIDTHS = {
    "shufflenet_v2_x0_5": [48, 96, 192, 1024], "shufflenet_v2_x1_0": [116, 232, 464, 1024],
    "shufflenet_v2_x1_5": [176, 352, 704, 1024], "shufflenet_v2_x2_0": [244, 488, 976, 2048],
}


def _depthwise(ch, stride):
    return nn.Conv2d(ch, ch, 3, stride, 1, groups=ch, bias=False)


class ShuffleUnitV2(nn.Module):
    """torchvision's InvertedResidual: (N, in_ch, H, W) -> (N, out_ch, H / stride, W / stride)."""

    def __init__(self, in_ch, out_ch, stride):
        super().__init__()
        if stride == 1 and in_ch != out_ch:
            raise ValueError(f"ShuffleUnitV2: a stride-1 unit keeps its width, got in_ch={in_ch}, "
                             f"out_ch={out_ch}")
        half = out_ch // 2
        self.stride = stride
        if stride > 1:
            self.branch1 = nn.Sequential(_depthwise(in_ch, stride), nn.BatchNorm2d(in_ch),
                                         nn.Conv2d(in_ch, half, 1, bias=False),
                                         nn.BatchNorm2d(half), nn.ReLU())
        self.branch2 = nn.Sequential(
            nn.Conv2d(in_ch if stride > 1 else half, half, 1, bias=False), nn.BatchNorm2d(half),
            nn.ReLU(), _depthwise(half, stride), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU())
        self.cat = nn.Concat(axis=1, shuffle=True)  # with the channel shuffle, one copy

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = F.split(x, 2, axis=1)          # two (N, C/2, H, W) halves
            return self.cat([x1, self.branch2(x2)])
        return self.cat([self.branch1(x), self.branch2(x)])

    def fuse_groups(self, prefix):
        groups = seq_groups(f"{prefix}.branch1", self.branch1) if self.stride > 1 else []
        return groups + seq_groups(f"{prefix}.branch2", self.branch2)


class ShuffleNetV2Backbone(Backbone):
    """`widths`: stage2-4 output widths and the conv5 width. C2 is the stem's max-pool
    output (24 channels, stride 4), C3-C4 stage2-3's, C5 conv5's (after stage4, stride 32;
    the classifier pools it), as MMPretrain's backbone ends at its last conv."""

    def __init__(self, widths, repeats=STAGE_REPEATS):
        super().__init__()
        self.conv1 = conv_bn_act(3, 24, 3, 2)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        in_ch = 24
        for stage, (n, width) in enumerate(zip(repeats, widths[:3]), start=2):
            units = [ShuffleUnitV2(in_ch, width, 2)] + [ShuffleUnitV2(width, width, 1)
                                                        for _ in range(n - 1)]
            setattr(self, f"stage{stage}", nn.Sequential(*units))
            in_ch = width
        self.conv5 = conv_bn_act(in_ch, widths[3], 1)
        self.feature_channels = dict(zip(FEATURES, [24] + list(widths[:2]) + [widths[3]]))
        self.feature_strides = dict(zip(FEATURES, (4, 8, 16, 32)))

    def forward_features(self, x):
        """{"C2": the stem's output, "C3": stage2's, "C4": stage3's, "C5": conv5's}."""
        c2 = self.maxpool(self.conv1(x))
        c3 = self.stage2(c2)
        c4 = self.stage3(c3)
        return {"C2": c2, "C3": c3, "C4": c4, "C5": self.conv5(self.stage4(c4))}

    def stages(self):
        return {"stem": ["conv1"], "C2": ["maxpool"], "C3": ["stage2"], "C4": ["stage3"],
                "C5": ["stage4", "conv5"]}

    def fuse_groups(self):
        groups = seq_groups("conv1", self.conv1)
        for stage in (2, 3, 4):
            for i, unit in enumerate(getattr(self, f"stage{stage}")):
                groups += unit.fuse_groups(f"stage{stage}.{i}")
        return groups + seq_groups("conv5", self.conv5)


class ShuffleNetV2(ShuffleNetV2Backbone, Classifier):
    """ShuffleNetV2Backbone + global pooling + fc, between quant stubs."""
    classifier_name = "fc"

    def __init__(self, widths, num_classes=1000, repeats=STAGE_REPEATS):
        super().__init__(widths, repeats)
        self.num_classes = num_classes
        self.quant = nn.QuantStub()
        self.avgpool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten(1)
        self.fc = nn.Linear(widths[3], num_classes)
        self.dequant = nn.DequantStub()

    def forward(self, x):
        x = self.forward_features(self.quant(x))["C5"]
        x = self.fc(self.flatten(self.avgpool(x)))   # (N, conv5 width) -> logits
        return self.dequant(x)


def _shufflenet_v2(arch, *, num_classes=1000, weights=None, pretrained=False):
    model = ShuffleNetV2(STAGE_WIDTHS[arch], num_classes)
    return load_into(model, arch, weights, pretrained)


def _shufflenet_v2_backbone(arch, *, weights=None, pretrained=False):
    model = ShuffleNetV2Backbone(STAGE_WIDTHS[arch])
    return load_backbone_weights(model, arch, weights, pretrained)


def _register(arch):
    register_backbone(arch, partial(_shufflenet_v2_backbone, arch))
    return register_model(arch, partial(_shufflenet_v2, arch), classification_card())


shufflenet_v2_x0_5 = _register("shufflenet_v2_x0_5")
shufflenet_v2_x1_0 = _register("shufflenet_v2_x1_0")
shufflenet_v2_x1_5 = _register("shufflenet_v2_x1_5")
shufflenet_v2_x2_0 = _register("shufflenet_v2_x2_0")
