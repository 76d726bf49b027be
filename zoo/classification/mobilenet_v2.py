"""MobileNetV2 (Sandler et al., 1801.04381) with torchvision's names and ReLU6.

`features.0` is the stem (conv, BN, ReLU6), `features.1-17` the inverted residuals
(`conv.{0.0,0.1,0.2}` expand, `conv.{1.0,1.1,1.2}` depthwise, `conv.2`/`conv.3` linear
projection and its BN; t=1 blocks lack the expansion), `features.18` the 1x1 to 1280,
`classifier.1` the Linear. QAT-ready: the residual add is `add` (nn.Add).

>>> import tianyuan as ty
>>> from tianyuan.zoo import mobilenet_v2
>>> mobilenet_v2(num_classes=10, width_mult=0.5)(ty.randn(1, 3, 64, 64)).shape
(1, 10)
"""
from tianyuan import nn

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


class MobileNetV2(Classifier):
    """width_mult scales every width (rounded to multiples of 8; the last conv never below
    1280). small_input: stride-1 stem for 32x32 images (CIFAR)."""
    classifier_name = "classifier.1"

    def __init__(self, num_classes=1000, width_mult=1.0, small_input=False, dropout=0.2):
        super().__init__()
        self.num_classes, self.width_mult, self.small_input = num_classes, width_mult, small_input
        in_ch = make_divisible(32 * width_mult)
        self.last_channel = make_divisible(1280 * max(1.0, width_mult))
        self.quant = nn.QuantStub()
        layers = [conv_bn_act(3, in_ch, 3, 1 if small_input else 2, act=nn.ReLU6)]
        for t, c, n, s in INVERTED_RESIDUAL_ROWS:
            out_ch = make_divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(in_ch, out_ch, s if i == 0 else 1, t))
                in_ch = out_ch
        layers.append(conv_bn_act(in_ch, self.last_channel, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.avgpool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout),
                                        self._new_head(self.last_channel, num_classes))
        self.dequant = nn.DequantStub()
        self._init_convs()

    def _init_convs(self):
        for module in self.modules():   # torchvision's init; the head is set by _new_head
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def _new_head(self, in_features, num_classes):
        head = nn.Linear(in_features, num_classes)
        nn.init.normal_(head.weight, 0.0, 0.01)
        nn.init.zeros_(head.bias)
        return head

    def forward(self, x):
        x = self.features(self.quant(x))                 # (N, last_channel, H/32, W/32)
        x = self.classifier(self.flatten(self.avgpool(x)))
        return self.dequant(x)

    def fuse_groups(self):
        last = len(self.features) - 1
        groups = seq_groups("features.0", self.features[0])
        for i in range(1, last):
            groups += self.features[i].fuse_groups(f"features.{i}")
        return groups + seq_groups(f"features.{last}", self.features[last])


def _mobilenet_v2(arch="mobilenet_v2", *, num_classes=1000, width_mult=1.0, weights=None,
                  pretrained=False, small_input=False, dropout=0.2):
    model = MobileNetV2(num_classes, width_mult, small_input, dropout)
    return load_into(model, arch, weights, pretrained)


def mobilenet_v2(**kwargs):
    """MobileNetV2; kwargs: num_classes, width_mult, weights, pretrained, small_input."""
    return _mobilenet_v2("mobilenet_v2", **kwargs)


register_model("mobilenet_v2", mobilenet_v2, classification_card(
    {"torchvision": {"top1": 71.878, "top5": 90.286},
     "megengine": {"top1": 72.808}},
    int8_metrics={"torchvision_int8_qat": {"top1": 71.658, "top5": 90.150},
                  "megengine_int8_qat": {"top1": 71.228, "float_top1": 72.808}}))
