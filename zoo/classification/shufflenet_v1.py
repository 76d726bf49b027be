"""ShuffleNet V1 (Zhang et al., 1707.01083): pointwise group convs and channel shuffle.

A unit is 1x1 group conv (g) -> BN -> ReLU -> shuffle -> 3x3 depthwise (stride) -> BN ->
1x1 group conv -> BN; a stride-1 unit adds its input then applies ReLU (`add_relu`), a
stride-2 unit concatenates a 3x3 average-pooled shortcut (`shortcut`, `cat`). The first 1x1
of stage 2 is not grouped (its input has only the stem's few channels). Bottleneck width
is a quarter of the unit's output, as in the paper.

The stride-2 unit applies its ReLU to the branch before the concat (`relu3`, fused into
conv3's group): the shortcut averages a post-ReLU input, so it is already >= 0 and this
equals ReLU after the concat (the paper's figure 2c), with one scale less to quantize.
`ShuffleNetV1Backbone` is the network less its head: C2 the stem's max-pool output, C3-C5
stage2-4's.

>>> import tianyuan as ty
>>> from tianyuan.zoo import shufflenet_v1
>>> shufflenet_v1(groups=8, width_mult=0.5, num_classes=10)(ty.randn(1, 3, 64, 64)).shape
(1, 10)
"""
from functools import partial

from tianyuan import nn

from ..backbones import FEATURES, Backbone, load_backbone_weights, register_backbone
from ..registry import classification_card, register_model
from .common import Classifier, conv_bn_act, kaiming_init, load_into, seq_groups

STAGE_REPEATS = [4, 8, 4]
# groups -> stage-2 output channels at width 1.0 (the paper's table 1); stages 3, 4 double
STAGE2_CHANNELS = {1: 144, 2: 200, 3: 240, 4: 272, 8: 384}
# width -> stem channels, as in the released Megvii/MegEngine models (rounded up to g)
STEM_CHANNELS = {0.5: 12, 1.0: 24, 1.5: 24, 2.0: 48}


def _round_to(value, multiple):
    return max(multiple, int(value / multiple + 0.5) * multiple)


def channels(groups, width_mult):
    """(stem, [stage2, stage3, stage4]) output channels; stages are multiples of 4 * groups
    (the bottleneck, a quarter of them, must split into `groups`)."""
    if groups not in STAGE2_CHANNELS:
        raise ValueError(f"shufflenet_v1: groups must be one of {sorted(STAGE2_CHANNELS)}, "
                         f"got {groups}")
    if width_mult not in STEM_CHANNELS:
        raise ValueError(f"shufflenet_v1: width_mult must be one of {sorted(STEM_CHANNELS)}, "
                         f"got {width_mult}")
    stem = -(-STEM_CHANNELS[width_mult] // groups) * groups   # round up to a multiple of g
    stage2 = _round_to(STAGE2_CHANNELS[groups] * width_mult, 4 * groups)
    return stem, [stage2, 2 * stage2, 4 * stage2]


class ShuffleUnitV1(nn.Module):
    """(N, in_ch, H, W) -> (N, out_ch, H / stride, W / stride)."""

    def __init__(self, in_ch, out_ch, groups, stride, first_group=False):
        super().__init__()
        if stride == 1 and in_ch != out_ch:
            raise ValueError(f"ShuffleUnitV1: a stride-1 unit keeps its width, got in_ch={in_ch}"
                             f", out_ch={out_ch}")
        mid = out_ch // 4
        branch_out = out_ch - in_ch if stride == 2 else out_ch   # stride 2 concats the input
        self.groups, self.stride = groups, stride
        self.conv1 = nn.Conv2d(in_ch, mid, 1, groups=1 if first_group else groups, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.relu1 = nn.ReLU()
        self.shuffle = nn.ChannelShuffle(groups) if groups > 1 else nn.Identity()
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, branch_out, 1, groups=groups, bias=False)
        self.bn3 = nn.BatchNorm2d(branch_out)
        if stride == 2:
            self.relu3 = nn.ReLU()
            self.shortcut = nn.AvgPool2d(3, 2, 1)
            self.cat = nn.Concat(axis=1)
        else:
            self.add_relu = nn.AddReLU()

    def forward(self, x):
        out = self.shuffle(nn.batch_norm_act(self.bn1, self.relu1, self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = self.bn3(self.conv3(out))
        if self.stride == 1:
            return self.add_relu(out, x)
        return self.cat([self.shortcut(x), self.relu3(out)])

    def fuse_groups(self, prefix):
        last = [f"{prefix}.conv3", f"{prefix}.bn3"] + ([f"{prefix}.relu3"] if self.stride == 2
                                                       else [])
        return [[f"{prefix}.conv1", f"{prefix}.bn1", f"{prefix}.relu1"],
                [f"{prefix}.conv2", f"{prefix}.bn2"], last]


class ShuffleNetV1Backbone(Backbone):
    """C2 is the stem's max-pool output (stride 4), C3-C5 stage2-4's (strides 8-32)."""

    def __init__(self, groups=3, width_mult=1.0, repeats=STAGE_REPEATS):
        super().__init__()
        self.groups, self.width_mult = groups, width_mult
        stem, widths = channels(groups, width_mult)
        self.conv1 = conv_bn_act(3, stem, 3, 2)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        in_ch = stem
        for stage, (n, width) in enumerate(zip(repeats, widths), start=2):
            units = [ShuffleUnitV1(in_ch, width, groups, 2, first_group=stage == 2)]
            units += [ShuffleUnitV1(width, width, groups, 1) for _ in range(n - 1)]
            setattr(self, f"stage{stage}", nn.Sequential(*units))
            in_ch = width
        self.feature_channels = dict(zip(FEATURES, [stem] + widths))
        self.feature_strides = dict(zip(FEATURES, (4, 8, 16, 32)))
        kaiming_init(self)

    def forward_features(self, x):
        """{"C2": the stem's output, "C3": stage2's, "C4": stage3's, "C5": stage4's}."""
        c2 = self.maxpool(self.conv1(x))
        c3 = self.stage2(c2)
        c4 = self.stage3(c3)
        return {"C2": c2, "C3": c3, "C4": c4, "C5": self.stage4(c4)}

    def stages(self):
        return {"stem": ["conv1"], "C2": ["maxpool"], "C3": ["stage2"], "C4": ["stage3"],
                "C5": ["stage4"]}

    def fuse_groups(self):
        groups = seq_groups("conv1", self.conv1)
        for stage in (2, 3, 4):
            for i, unit in enumerate(getattr(self, f"stage{stage}")):
                groups += unit.fuse_groups(f"stage{stage}.{i}")
        return groups


class ShuffleNetV1(ShuffleNetV1Backbone, Classifier):
    """ShuffleNetV1Backbone + global pooling + fc, between quant stubs."""
    classifier_name = "fc"

    def __init__(self, groups=3, width_mult=1.0, num_classes=1000, repeats=STAGE_REPEATS):
        super().__init__(groups, width_mult, repeats)
        self.num_classes = num_classes
        self.quant = nn.QuantStub()
        self.avgpool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten(1)
        self.dequant = nn.DequantStub()
        self.fc = self._new_head(self.feature_channels["C5"], num_classes)

    def _new_head(self, in_features, num_classes):
        # small logits at the start, as the released models' training (Megvii) began
        head = nn.Linear(in_features, num_classes)
        nn.init.normal_(head.weight, 0.0, 0.01)
        nn.init.zeros_(head.bias)
        return head

    def forward(self, x):
        x = self.forward_features(self.quant(x))["C5"]
        x = self.fc(self.flatten(self.avgpool(x)))      # (N, stage4 width) -> logits
        return self.dequant(x)


def _shufflenet_v1(arch="shufflenet_v1", *, groups=3, width_mult=1.0, num_classes=1000,
                   weights=None, pretrained=False):
    model = ShuffleNetV1(groups, width_mult, num_classes)
    return load_into(model, arch, weights, pretrained)


def _shufflenet_v1_backbone(arch="shufflenet_v1", *, groups=3, width_mult=1.0, weights=None,
                            pretrained=False):
    model = ShuffleNetV1Backbone(groups, width_mult)
    return load_backbone_weights(model, arch, weights, pretrained)


def shufflenet_v1(**kwargs):
    """ShuffleNet V1; kwargs: groups (1, 2, 3, 4, 8), width_mult (0.5, 1.0, 1.5, 2.0),
    num_classes, weights."""
    return _shufflenet_v1("shufflenet_v1", **kwargs)


def _variant(name, groups, width_mult):
    register_backbone(name, partial(_shufflenet_v1_backbone, name, groups=groups,
                                    width_mult=width_mult))
    builder = partial(_shufflenet_v1, name, groups=groups, width_mult=width_mult)
    return register_model(name, builder, classification_card())


register_backbone("shufflenet_v1", _shufflenet_v1_backbone)
# the default build is the x1.0 g3 variant, whose published numbers it shows
register_model("shufflenet_v1", shufflenet_v1,
               classification_card(weights_arch="shufflenet_v1_x1_0_g3"))
# the variants Megvii released: groups 3 and 8 at every width
shufflenet_v1_x0_5_g3 = _variant("shufflenet_v1_x0_5_g3", 3, 0.5)
shufflenet_v1_x1_0_g3 = _variant("shufflenet_v1_x1_0_g3", 3, 1.0)
shufflenet_v1_x1_5_g3 = _variant("shufflenet_v1_x1_5_g3", 3, 1.5)
shufflenet_v1_x2_0_g3 = _variant("shufflenet_v1_x2_0_g3", 3, 2.0)
shufflenet_v1_x0_5_g8 = _variant("shufflenet_v1_x0_5_g8", 8, 0.5)
shufflenet_v1_x1_0_g8 = _variant("shufflenet_v1_x1_0_g8", 8, 1.0)
shufflenet_v1_x1_5_g8 = _variant("shufflenet_v1_x1_5_g8", 8, 1.5)
shufflenet_v1_x2_0_g8 = _variant("shufflenet_v1_x2_0_g8", 8, 2.0)
