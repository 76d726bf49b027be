"""ResNet-18/34/50/101/152 (He et al., 1512.03385) in torchvision's "v1.5" layout.

The bottleneck strides in its 3x3 conv (conv2), not in the first 1x1. State-dict names
and shapes equal torchvision's (`conv1`, `bn1`, `layer{1-4}.{i}.conv{1,2,3}`/`bn*`,
`layerN.0.downsample.{0,1}`, `fc`), so published weights load by name. QAT-ready: each
ReLU is its own module (`relu1`, `relu2`) and the residual add is `add_relu`
(nn.AddReLU) — parameter-free, so the state dict is unchanged. `ResNetBackbone` is the stem
and stages alone (`forward_features`: C2-C5 = layer1-4), the classifier that plus a head.

>>> import tianyuan as ty
>>> from tianyuan.zoo import resnet18
>>> resnet18(num_classes=10, small_input=True)(ty.randn(2, 3, 32, 32)).shape
(2, 10)
"""
from functools import partial

from tianyuan import nn

from ..backbones import Backbone, load_backbone_weights, register_backbone
from ..registry import classification_card, register_model
from .common import Classifier, kaiming_init, load_into


def conv3x3(in_ch, out_ch, stride=1):
    return nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)


def conv1x1(in_ch, out_ch, stride=1):
    return nn.Conv2d(in_ch, out_ch, 1, stride, 0, bias=False)


def _downsample_groups(block, prefix):
    return [] if block.downsample is None else [[f"{prefix}.downsample.0",
                                                 f"{prefix}.downsample.1"]]


class BasicBlock(nn.Module):
    """3x3 -> 3x3, + identity (ResNet-18/34)."""
    expansion = 1

    def __init__(self, in_ch, width, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(in_ch, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU()
        self.conv2 = conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = downsample
        self.add_relu = nn.AddReLU()

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = nn.batch_norm_act(self.bn1, self.relu1, self.conv1(x))
        out = self.bn2(self.conv2(out))
        return self.add_relu(out, identity)

    def fuse_groups(self, prefix):
        return ([[f"{prefix}.conv1", f"{prefix}.bn1", f"{prefix}.relu1"],
                 [f"{prefix}.conv2", f"{prefix}.bn2"]] + _downsample_groups(self, prefix))


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (carries the stride, v1.5) -> 1x1 expand x4, + identity."""
    expansion = 4

    def __init__(self, in_ch, width, stride=1, downsample=None):
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = conv1x1(in_ch, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU()
        self.conv2 = conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu2 = nn.ReLU()
        self.conv3 = conv1x1(width, out_ch)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.downsample = downsample
        self.add_relu = nn.AddReLU()

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = nn.batch_norm_act(self.bn1, self.relu1, self.conv1(x))
        out = nn.batch_norm_act(self.bn2, self.relu2, self.conv2(out))
        out = self.bn3(self.conv3(out))
        return self.add_relu(out, identity)

    def fuse_groups(self, prefix):
        return ([[f"{prefix}.conv1", f"{prefix}.bn1", f"{prefix}.relu1"],
                 [f"{prefix}.conv2", f"{prefix}.bn2", f"{prefix}.relu2"],
                 [f"{prefix}.conv3", f"{prefix}.bn3"]] + _downsample_groups(self, prefix))


class ResNetBackbone(Backbone):
    """The stem and the four stages, `layers` blocks each at widths 64/128/256/512 (x
    `block.expansion` out): C2-C5 are layer1-layer4's outputs (strides 4-32; 1-8 with
    small_input). torchvision's detection `backbone.body`.

    small_input: the CIFAR stem (3x3 stride-1 conv, no max-pool) for 32x32 images.
    zero_init_residual: start each block's last BN at 0, so blocks begin as identities.
    init_weights: False leaves the init to a subclass that adds layers first (ResNet: the
    random draws in the order they have always been made).
    """

    def __init__(self, block, layers, small_input=False, zero_init_residual=False,
                 init_weights=True):
        super().__init__()
        self.small_input = small_input
        if small_input:
            self.conv1, self.maxpool = conv3x3(3, 64), nn.Identity()
        else:
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.bn1, self.relu = nn.BatchNorm2d(64), nn.ReLU()
        in_ch, stride = 64, 1 if small_input else 4
        self.feature_channels, self.feature_strides = {}, {}
        for i, (n, width) in enumerate(zip(layers, (64, 128, 256, 512)), start=1):
            stage, in_ch = self._make_layer(block, in_ch, width, n, 1 if i == 1 else 2)
            setattr(self, f"layer{i}", stage)
            stride *= 1 if i == 1 else 2
            self.feature_channels[f"C{i + 1}"], self.feature_strides[f"C{i + 1}"] = in_ch, stride
        if init_weights:
            self.init_weights(zero_init_residual)

    def init_weights(self, zero_init_residual=False):
        kaiming_init(self)
        if zero_init_residual:
            for module in self.modules():
                if isinstance(module, (BasicBlock, Bottleneck)):
                    last = module.bn3 if isinstance(module, Bottleneck) else module.bn2
                    nn.init.zeros_(last.weight)

    @staticmethod
    def _make_layer(block, in_ch, width, n, stride):
        out_ch = width * block.expansion
        downsample = None
        if stride != 1 or in_ch != out_ch:
            downsample = nn.Sequential(conv1x1(in_ch, out_ch, stride), nn.BatchNorm2d(out_ch))
        blocks = [block(in_ch, width, stride, downsample)]
        blocks += [block(out_ch, width) for _ in range(1, n)]
        return nn.Sequential(*blocks), out_ch

    def forward_features(self, x):
        """{"C2": layer1's output, ..., "C5": layer4's}, (N, C, H / stride, W / stride)."""
        x = self.maxpool(nn.batch_norm_act(self.bn1, self.relu, self.conv1(x)))
        c2 = self.layer1(x)
        c3 = self.layer2(c2)
        c4 = self.layer3(c3)
        return {"C2": c2, "C3": c3, "C4": c4, "C5": self.layer4(c4)}

    def stages(self):
        return {"stem": ["conv1", "bn1"], "C2": ["layer1"], "C3": ["layer2"],
                "C4": ["layer3"], "C5": ["layer4"]}

    def fuse_groups(self):
        groups = [["conv1", "bn1", "relu"]]
        for i in range(1, 5):
            for j, blk in enumerate(getattr(self, f"layer{i}")):
                groups += blk.fuse_groups(f"layer{i}.{j}")
        return groups


class ResNet(ResNetBackbone, Classifier):
    """ResNetBackbone + global pooling + fc, between quant stubs."""
    classifier_name = "fc"

    def __init__(self, block, layers, num_classes=1000, small_input=False,
                 zero_init_residual=False):
        super().__init__(block, layers, small_input, init_weights=False)
        self.num_classes = num_classes
        self.quant = nn.QuantStub()
        self.avgpool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten(1)
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        self.dequant = nn.DequantStub()
        self.init_weights(zero_init_residual)

    def forward(self, x):
        x = self.forward_features(self.quant(x))["C5"]
        x = self.fc(self.flatten(self.avgpool(x)))   # (N, 512 * expansion) -> (N, classes)
        return self.dequant(x)


def _resnet(arch, block, layers, *, num_classes=1000, weights=None, pretrained=False,
            small_input=False, zero_init_residual=False):
    model = ResNet(block, layers, num_classes, small_input, zero_init_residual)
    return load_into(model, arch, weights, pretrained)


def _resnet_backbone(arch, block, layers, *, weights=None, pretrained=False, small_input=False,
                     zero_init_residual=False):
    model = ResNetBackbone(block, layers, small_input, zero_init_residual)
    return load_backbone_weights(model, arch, weights, pretrained)


# arch -> (block, blocks per stage): the paper's table 1
ARCHS = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet34": (BasicBlock, [3, 4, 6, 3]),
         "resnet50": (Bottleneck, [3, 4, 6, 3]), "resnet101": (Bottleneck, [3, 4, 23, 3]),
         "resnet152": (Bottleneck, [3, 8, 36, 3])}


def _register(arch):
    block, layers = ARCHS[arch]
    register_backbone(arch, partial(_resnet_backbone, arch, block, layers))
    return register_model(arch, partial(_resnet, arch, block, layers), classification_card())


resnet18 = _register("resnet18")
resnet34 = _register("resnet34")
resnet50 = _register("resnet50")
resnet101 = _register("resnet101")
resnet152 = _register("resnet152")
