"""MobileNetV2 (Sandler et al., 1801.04381) with torchvision's names and ReLU6.

`features.0` is the stem (conv, BN, ReLU6), `features.1-17` the inverted residuals
(`conv.{0.0,0.1,0.2}` expand, `conv.{1.0,1.1,1.2}` depthwise, `conv.2`/`conv.3` linear
projection and its BN; t=1 blocks lack the expansion), `features.18` the 1x1 to 1280,
`classifier.1` the Linear. QAT-ready: the residual add is `add` (nn.Add).
`MobileNetV2Backbone` is `features` alone: C2-C5 = features.3, .6, .13 and .18 (24, 32, 96
and 1280 channels), the last layer at each stride from 4 to 32.

>>> import tianyuan as ty
>>> from tianyuan.zoo import mobilenet_v2
>>> mobilenet_v2(num_classes=10, width_mult=0.5)(ty.randn(1, 3, 64, 64)).shape
(1, 10)
"""
from tianyuan import nn

from ..backbones import FEATURES, Backbone, load_backbone_weights, register_backbone
from ..registry import classification_card, register_model
from .common import Classifier, conv_bn_act, load_into, seq_groups

# (t expansion, c output channels, n repeats, s stride of the first) -- the paper's table 2
INVERTED_RESIDUAL_ROWS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                          (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def make_divisible(value, divisor=8):
    """Round `value` to the nearest multiple of `divisor`, never more than 10% below it."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class InvertedResidual(nn.Module):
    """1x1 expand (x t) -> 3x3 depthwise (stride) -> 1x1 linear project, + input if shapes
    match."""

    def __init__(self, in_ch, out_ch, stride, expand_ratio):
        super().__init__()
        hidden = int(round(in_ch * expand_ratio))
        self.use_res_connect = stride == 1 and in_ch == out_ch
        layers = [] if expand_ratio == 1 else [conv_bn_act(in_ch, hidden, 1, act=nn.ReLU6)]
        layers += [conv_bn_act(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   nn.Conv2d(hidden, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch)]
        self.conv = nn.Sequential(*layers)
        if self.use_res_connect:
            self.add = nn.Add()

    def forward(self, x):
        out = self.conv(x)
        return self.add(x, out) if self.use_res_connect else out

    def fuse_groups(self, prefix):
        mods = list(self.conv)
        groups = [seq_groups(f"{prefix}.conv.{i}", m)[0] for i, m in enumerate(mods[:-2])]
        return groups + seq_groups(f"{prefix}.conv", self.conv)


def stage_ends(rows=INVERTED_RESIDUAL_ROWS):
    """`features` indices of C2-C5: the last layer before each stride-2 row and the final
    1x1 conv, less the first end (the stride-2 stem's) -- [3, 6, 13, 18] for the paper's
    rows (24, 32, 96 and 1280 channels at width 1.0; torchvision's detection backbones also
    end at the last conv)."""
    ends, index = [], 1                     # features.0 is the stem
    for _t, _c, n, s in rows:
        if s == 2:
            ends.append(index - 1)
        index += n
    return ends[1:] + [index]               # features.{index}: the 1x1 conv to last_channel


class MobileNetV2Backbone(Backbone):
    """`features` (stem, inverted residuals, the 1x1 to last_channel); C2-C5 at the ends of
    `stage_ends()` (strides 4-32; 2-16 with small_input). width_mult scales every width
    (rounded to multiples of 8; the last conv never below 1280). small_input: stride-1 stem
    for 32x32 images (CIFAR)."""
    head_prefixes = ("classifier.",)

    def __init__(self, width_mult=1.0, small_input=False, init_weights=True):
        super().__init__()
        self.width_mult, self.small_input = width_mult, small_input
        in_ch = make_divisible(32 * width_mult)
        self.last_channel = make_divisible(1280 * max(1.0, width_mult))
        layers = [conv_bn_act(3, in_ch, 3, 1 if small_input else 2, act=nn.ReLU6)]
        strides = [1 if small_input else 2]
        for t, c, n, s in INVERTED_RESIDUAL_ROWS:
            out_ch = make_divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(in_ch, out_ch, s if i == 0 else 1, t))
                strides.append(strides[-1] * (s if i == 0 else 1))
                in_ch = out_ch
        layers.append(conv_bn_act(in_ch, self.last_channel, 1, act=nn.ReLU6))
        strides.append(strides[-1])
        self.features = nn.Sequential(*layers)
        self.feature_index = dict(zip(FEATURES, stage_ends()))
        self.feature_channels = {k: _out_channels(self.features[i])
                                 for k, i in self.feature_index.items()}
        self.feature_strides = {k: strides[i] for k, i in self.feature_index.items()}
        if init_weights:
            self.init_weights()

    def init_weights(self):
        for module in self.modules():   # torchvision's init; the head is set by _new_head
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward_features(self, x):
        """{"C2": features.3's output, ...}, (N, C, H / stride, W / stride)."""
        out, ends = {}, {i: k for k, i in self.feature_index.items()}
        for i, layer in enumerate(self.features):
            x = layer(x)
            if i in ends:
                out[ends[i]] = x
        return out

    def stages(self):
        starts = [0] + [self.feature_index[k] + 1 for k in FEATURES]
        names = [[f"features.{i}" for i in range(a, b)] for a, b in zip(starts, starts[1:])]
        return dict(zip(("stem",) + FEATURES, names))

    def fuse_groups(self):
        last = len(self.features) - 1
        groups = seq_groups("features.0", self.features[0])
        for i in range(1, last):
            groups += self.features[i].fuse_groups(f"features.{i}")
        return groups + seq_groups(f"features.{last}", self.features[last])


def _out_channels(layer):
    convs = [m for m in layer.modules() if isinstance(m, nn.Conv2d)]
    return convs[-1].out_channels


class MobileNetV2(MobileNetV2Backbone, Classifier):
    """MobileNetV2Backbone + global pooling + dropout + Linear, between quant stubs."""
    classifier_name = "classifier.1"

    def __init__(self, num_classes=1000, width_mult=1.0, small_input=False, dropout=0.2):
        super().__init__(width_mult, small_input, init_weights=False)
        self.num_classes = num_classes
        self.quant = nn.QuantStub()
        self.avgpool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout),
                                        self._new_head(self.last_channel, num_classes))
        self.dequant = nn.DequantStub()
        self.init_weights()

    def _new_head(self, in_features, num_classes):
        head = nn.Linear(in_features, num_classes)
        nn.init.normal_(head.weight, 0.0, 0.01)
        nn.init.zeros_(head.bias)
        return head

    def forward(self, x):
        x = self.forward_features(self.quant(x))["C5"]   # (N, last_channel, H/32, W/32)
        x = self.classifier(self.flatten(self.avgpool(x)))
        return self.dequant(x)


def _mobilenet_v2(arch="mobilenet_v2", *, num_classes=1000, width_mult=1.0, weights=None,
                  pretrained=False, small_input=False, dropout=0.2):
    model = MobileNetV2(num_classes, width_mult, small_input, dropout)
    return load_into(model, arch, weights, pretrained)


def _mobilenet_v2_backbone(arch="mobilenet_v2", *, width_mult=1.0, weights=None,
                           pretrained=False, small_input=False):
    model = MobileNetV2Backbone(width_mult, small_input)
    return load_backbone_weights(model, arch, weights, pretrained)


def mobilenet_v2(**kwargs):
    """MobileNetV2; kwargs: num_classes, width_mult, weights, pretrained, small_input."""
    return _mobilenet_v2("mobilenet_v2", **kwargs)


register_backbone("mobilenet_v2", _mobilenet_v2_backbone)
register_model("mobilenet_v2", mobilenet_v2, classification_card())
