"""SimpleBaseline (Xiao et al., "Simple Baselines for Human Pose Estimation and Tracking",
1804.06208): a ResNet's C5, three ConvTranspose2d(256, 4x4, stride 2, padding 1, no bias)
+ BN + ReLU, a 1x1 conv to K heatmaps at a quarter of the input's size.

The model is a ResNetBackbone with the head added (as the zoo's ResNet classifier is), so its
state-dict names are the official release's (`pose_resnet_50_256x192.pth.tar`): `conv1`,
`bn1`, `layer1-4` (torchvision's), `deconv_layers.{0,1,3,4,6,7}` (deconv, BN; 2, 5, 8 the
ReLUs) and `final_layer`. MegEngine Models' files (`backbone.*`, `deconv_layers.body.*`, a
3x3 `last_layer`) are renamed by weights/keypoint_maps.py; the final layer's kernel is the
file's. QAT-ready: quant/dequant stubs at the ends, every ReLU a module.

>>> import tianyuan as ty
>>> from tianyuan.zoo import simplebaseline_res18
>>> simplebaseline_res18(num_joints=5)(ty.randn(1, 3, 64, 64)).shape
(1, 5, 16, 16)
"""
from functools import partial

from tianyuan import nn

from ..classification.common import kaiming_init
from ..classification.resnet import ARCHS, ResNetBackbone
from ..registry import register_model
from .common import (HeatmapRange, fusible, head_init, keypoint_card, load_backbone_into,
                     load_pose_weights, seq_conv_groups)
from .losses import joints_mse_loss


def deconv_head(in_ch, channels, kernel=4):
    """Sequential of (ConvTranspose2d(k, stride 2), BN, ReLU) per width in `channels`; each
    doubles the size (kernel 4: padding 1; 3: padding 1, output_padding 1; 2: padding 0)."""
    padding, output_padding = {4: (1, 0), 3: (1, 1), 2: (0, 0)}[kernel]
    layers = []
    for width in channels:
        layers += [nn.ConvTranspose2d(in_ch, width, kernel, 2, padding, output_padding,
                                      bias=False), nn.BatchNorm2d(width), nn.ReLU()]
        in_ch = width
    return nn.Sequential(*layers)


class SimpleBaseline(HeatmapRange, ResNetBackbone):
    """ResNet stem and stages, `deconv_layers`, `final_layer` (K heatmaps), between quant
    stubs. `heatmap_range`: the scale the weights' heatmaps peak at (1; MegEngine's 255),
    divided out so that the output peaks near 1 whatever the file."""

    def __init__(self, block, layers, num_joints=17, deconv_channels=(256, 256, 256),
                 final_kernel=1, heatmap_range=1.0):
        super().__init__(block, layers, init_weights=False)
        self.num_joints, self.heatmap_range = int(num_joints), float(heatmap_range)
        self.quant = nn.QuantStub()
        self.deconv_layers = deconv_head(self.feature_channels["C5"], deconv_channels)
        self.final_layer = nn.Conv2d(deconv_channels[-1], self.num_joints, final_kernel, 1,
                                     final_kernel // 2)
        self.dequant = nn.DequantStub()
        kaiming_init(self)
        head_init(self.deconv_layers)
        head_init(self.final_layer)

    def forward(self, x):
        """(N, 3, H, W) -> (N, K, H / 4, W / 4) heatmaps."""
        x = self.forward_features(self.quant(x))["C5"]          # (N, C5, H / 32, W / 32)
        out = self.dequant(self.final_layer(self.deconv_layers(x)))
        return self.unscaled(out)

    def losses(self, images, target, target_weight):
        return {"loss_heatmap": joints_mse_loss(self(images), target, target_weight)}

    def fuse_groups(self):
        return super().fuse_groups() + fusible(self, seq_conv_groups("deconv_layers",
                                                                     self.deconv_layers))


def fit_final_layer(model, state):
    """A file whose final layer has another kernel (MegEngine's 3x3) gets a layer of that
    kernel; another joint count is left for load_state_dict to name."""
    weight = state.get("final_layer.weight")
    if weight is None or weight.ndim != 4:
        return
    kernel = int(weight.shape[-1])
    old = model.final_layer
    if kernel != old.kernel_size[0]:
        model.final_layer = nn.Conv2d(old.in_channels, old.out_channels, kernel, 1, kernel // 2)


def _simplebaseline(arch, backbone_arch, *, num_joints=17, weights=None, pretrained=False,
                    backbone_weights=None, deconv_channels=(256, 256, 256), final_kernel=1,
                    heatmap_range=1.0, layers=None):
    """`weights`/`pretrained`: a pose file or manifest entry; `backbone_weights`: ImageNet
    weights for the backbone alone (a manifest name or file, True: the default entry), the
    paper's starting point for training. `layers`: blocks per stage other than the
    backbone's (the smoke model's shallower ResNet)."""
    block, depth = ARCHS[backbone_arch]
    layers = list(layers or depth)
    model = SimpleBaseline(block, layers, num_joints, tuple(deconv_channels), final_kernel,
                           heatmap_range)
    load_backbone_into(model, backbone_arch, backbone_weights)
    return load_pose_weights(model, arch, weights, pretrained, adapt=fit_final_layer)


def _register(arch, backbone_arch, **defaults):
    card = keypoint_card(backbone=backbone_arch)
    return register_model(arch, partial(_simplebaseline, arch, backbone_arch, **defaults), card)


simplebaseline_res50 = _register("simplebaseline_res50", "resnet50")
simplebaseline_res101 = _register("simplebaseline_res101", "resnet101")
simplebaseline_res152 = _register("simplebaseline_res152", "resnet152")
simplebaseline_res18 = _register("simplebaseline_res18", "resnet18")
# the smoke model: a ResNet-18 of one block per stage ("ResNet-10"), 64-wide deconvolutions,
# from scratch (a few minutes on 2 cores)
simplebaseline_small = _register("simplebaseline_small", "resnet18", layers=(1, 1, 1, 1),
                                 deconv_channels=(64, 64, 64))
