"""The 32x32 ResNet GANs of pytorch_mimicry (Lee & Town 2020) as MegEngine Models'
`official/vision/gan/megengine_mimicry` ports them: `dcgan_cifar10` and `wgan_cifar10`.

Both are the SNGAN ResNet backbone (Miyato et al. 2018, appendix B.4) without spectral
norm: a linear layer to a 4x4x256 map, three residual up-blocks, BN-ReLU-conv3x3 to RGB;
the discriminator one "optimized" down-block, one down-block and two plain blocks of 128
channels, ReLU, global pooling and a linear score. What differs (DCGAN of Kurach et al.
2019's settings, as mimicry's `dcgan_cifar.py`; WGAN-WC, MegEngine's `wgan_cifar.py`):

| | output | data the discriminator sees | pooling | discriminator blocks |
|---|---|---|---|---|
| dcgan_cifar10 | sigmoid | [0, 1] | sum | plain |
| wgan_cifar10 | tanh | [-1, 1] | mean | a parameter-free layer norm before each ReLU |

Our generators return [-1, 1] either way: the DCGAN's sigmoid output s becomes 2s - 1 and
its discriminator first maps x back to (x + 1) / 2, so the reference's computation and
its weights are kept exactly. Module names are mimicry's (`l1`, `block2.c1`, `b5`, `c5`;
`block1.c_sc`, `l5`), so `dcgan_cifar.pkl` and mimicry checkpoints load by name under
`generator.` / `discriminator.`. Activations, pools and residual adds are modules, each
called once.

>>> from tianyuan.zoo import get_model
>>> gan = get_model("wgan_cifar10", ngf=32, ndf=32)
>>> gan.discriminator(gan.generator(gan.noise(2))).shape
(2, 1)
"""
import math
from functools import partial

import tianyuan.functional as F
from tianyuan import nn

from ..registry import register_model
from .common import GAN, gan_card, load_into

MEGENGINE_GAN = "MegEngine Models official/vision/gan/README.md (REFERENCE.md)"


def _up():
    """x2 bilinear, align_corners False (mimicry: torchvision's segmentation upsampling)."""
    return nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)


def _xavier(conv, gain):
    nn.init.xavier_uniform_(conv.weight, gain)
    return conv


class SampleNorm(nn.Module):
    """Layer norm over each sample's (C, H, W), no parameters: (x - mean) / max(std, 1e-6)
    (MegEngine's wgan_base.layernorm)."""

    def forward(self, x):
        flat = x.reshape(x.shape[0], -1)                         # (N, C*H*W)
        centred = flat - flat.mean(axis=1, keepdims=True)
        std = F.sqrt((centred * centred).mean(axis=1, keepdims=True))
        return (centred / F.maximum(std, 1e-6)).reshape(*x.shape)


class GBlock(nn.Module):
    """Residual up-block: BN-ReLU-up-conv3x3, BN-ReLU-conv3x3; shortcut up + conv1x1.

    Quantized, the BN-ReLU pairs are BnReLU2d groups (`fuse_groups`) and the bilinear
    upsamplings (`up`, `up_sc`) stay float between a DequantStub and a QuantStub (`up_*` for
    the residual branch, `sc_*` for the shortcut): no int8 bilinear kernel exists."""

    def __init__(self, in_ch, out_ch, upsample=True):
        super().__init__()
        self.upsample = upsample
        self.b1, self.act1 = nn.BatchNorm2d(in_ch), nn.ReLU()
        self.c1 = _xavier(nn.Conv2d(in_ch, out_ch, 3, 1, 1), math.sqrt(2.0))
        self.b2, self.act2 = nn.BatchNorm2d(out_ch), nn.ReLU()
        self.c2 = _xavier(nn.Conv2d(out_ch, out_ch, 3, 1, 1), math.sqrt(2.0))
        self.learnable_sc = in_ch != out_ch or upsample
        if self.learnable_sc:
            self.c_sc = _xavier(nn.Conv2d(in_ch, out_ch, 1, 1, 0), 1.0)
        if upsample:
            self.up_dequant, self.up, self.up_quant = nn.DequantStub(), _up(), nn.QuantStub()
            self.sc_dequant, self.up_sc, self.sc_quant = nn.DequantStub(), _up(), nn.QuantStub()
        self.add = nn.Add()

    def fuse_groups(self, prefix):
        return [[f"{prefix}.b1", f"{prefix}.act1"], [f"{prefix}.b2", f"{prefix}.act2"]]

    def forward(self, x):
        h = self.act1(self.b1(x))
        if self.upsample:
            h = self.up_quant(self.up(self.up_dequant(h)))
        h = self.c2(self.act2(self.b2(self.c1(h))))
        if self.learnable_sc:
            x = self.c_sc(self.sc_quant(self.up_sc(self.sc_dequant(x))) if self.upsample else x)
        return self.add(h, x)


class DBlock(nn.Module):
    """Residual block: [norm]-ReLU-conv3x3, [norm]-ReLU-conv3x3 (hidden = in channels),
    2x2 average pool if `downsample`. The shortcut takes ReLU(x): mimicry's in-place ReLU
    rewrote x before its shortcut read it (MegEngine passes F.relu(x) to match)."""

    def __init__(self, in_ch, out_ch, downsample=False, layer_norm=False):
        super().__init__()
        self.downsample = downsample
        self.norm1 = SampleNorm() if layer_norm else nn.Identity()
        self.act1 = nn.ReLU()
        self.c1 = _xavier(nn.Conv2d(in_ch, in_ch, 3, 1, 1), math.sqrt(2.0))
        self.norm2 = SampleNorm() if layer_norm else nn.Identity()
        self.act2 = nn.ReLU()
        self.c2 = _xavier(nn.Conv2d(in_ch, out_ch, 3, 1, 1), math.sqrt(2.0))
        self.act_sc = nn.ReLU()
        self.learnable_sc = in_ch != out_ch or downsample
        if self.learnable_sc:
            self.c_sc = _xavier(nn.Conv2d(in_ch, out_ch, 1, 1, 0), 1.0)
        if downsample:
            self.pool, self.pool_sc = nn.AvgPool2d(2), nn.AvgPool2d(2)
        self.add = nn.Add()

    def forward(self, x):
        h = self.c1(self.act1(self.norm1(x)))
        h = self.c2(self.act2(self.norm2(h)))
        s = self.act_sc(x)
        if self.learnable_sc:
            s = self.c_sc(s)
        if self.downsample:
            h, s = self.pool(h), self.pool_sc(s)
        return self.add(h, s)


class DBlockOptimized(nn.Module):
    """The first down-block (SNGAN's chainer reference): conv3x3-ReLU-conv3x3-pool, plus
    pool-conv1x1 of the input."""

    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.c1 = _xavier(nn.Conv2d(in_ch, out_ch, 3, 1, 1), math.sqrt(2.0))
        self.act1 = nn.ReLU()
        self.c2 = _xavier(nn.Conv2d(out_ch, out_ch, 3, 1, 1), math.sqrt(2.0))
        self.pool, self.pool_sc = nn.AvgPool2d(2), nn.AvgPool2d(2)
        self.c_sc = _xavier(nn.Conv2d(in_ch, out_ch, 1, 1, 0), 1.0)
        self.add = nn.Add()

    def forward(self, x):
        h = self.pool(self.c2(self.act1(self.c1(x))))
        return self.add(h, self.c_sc(self.pool_sc(x)))


class ResNetGenerator32(nn.Module):
    """z (N, nz) -> (N, 3, 32, 32) in [-1, 1]; `output` "tanh" or "sigmoid" (rescaled)."""

    def __init__(self, nz=128, ngf=256, bottom_width=4, output="tanh"):
        super().__init__()
        if output not in ("tanh", "sigmoid"):
            raise ValueError(f"ResNetGenerator32: output must be 'tanh' or 'sigmoid', got "
                             f"{output!r}")
        self.nz, self.ngf, self.bottom_width, self.output = nz, ngf, bottom_width, output
        self.l1 = _xavier(nn.Linear(nz, bottom_width ** 2 * ngf), 1.0)
        self.block2 = GBlock(ngf, ngf, upsample=True)                   # (N, ngf, 8, 8)
        self.block3 = GBlock(ngf, ngf, upsample=True)                   # 16 x 16
        self.block4 = GBlock(ngf, ngf, upsample=True)                   # 32 x 32
        self.b5, self.act5 = nn.BatchNorm2d(ngf), nn.ReLU()
        self.c5 = _xavier(nn.Conv2d(ngf, 3, 3, 1, 1), 1.0)
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        self.out = (nn.Tanh() if output == "tanh" else
                    nn.Sequential(nn.Sigmoid(), nn.Rescale(2.0, -1.0)))   # [0, 1] -> [-1, 1]

    def fuse_groups(self):
        """The blocks' BN-ReLU pairs and b5-act5 (BnReLU2d: int8 as depthwise 1x1 convs)."""
        groups = [g for name in ("block2", "block3", "block4")
                  for g in getattr(self, name).fuse_groups(name)]
        return groups + [["b5", "act5"]]

    def forward(self, z):
        w = self.bottom_width
        h = self.l1(self.quant(z)).reshape(z.shape[0], self.ngf, w, w)  # (N, ngf, 4, 4)
        h = self.block4(self.block3(self.block2(h)))
        return self.out(self.dequant(self.c5(self.act5(self.b5(h)))))    # float tanh/sigmoid


class ResNetDiscriminator32(nn.Module):
    """(N, 3, 32, 32) in [-1, 1] -> (N, 1). `pool` "sum" or "mean" over the 8x8 map;
    `unit_input`: score (x + 1) / 2, the [0, 1] images the reference trained on."""

    def __init__(self, ndf=128, pool="sum", layer_norm=False, unit_input=False):
        super().__init__()
        if pool not in ("sum", "mean"):
            raise ValueError(f"ResNetDiscriminator32: pool must be 'sum' or 'mean', got {pool!r}")
        self.pool, self.unit_input = pool, unit_input
        self.block1 = DBlockOptimized(3, ndf)                            # (N, ndf, 16, 16)
        self.block2 = DBlock(ndf, ndf, True, layer_norm)                 # 8 x 8
        self.block3 = DBlock(ndf, ndf, False, layer_norm)
        self.block4 = DBlock(ndf, ndf, False, layer_norm)
        self.act5 = nn.ReLU()
        self.l5 = _xavier(nn.Linear(ndf, 1), 1.0)

    def forward(self, x):
        if self.unit_input:
            x = x * 0.5 + 0.5
        h = self.act5(self.block4(self.block3(self.block2(self.block1(x)))))
        h = h.sum(axis=(2, 3)) if self.pool == "sum" else h.mean(axis=(2, 3))   # (N, ndf)
        return self.l5(h)


# name -> (generator output, discriminator pooling, layer norm, [0, 1] discriminator input)
VARIANTS = {"dcgan_cifar10": ("sigmoid", "sum", False, True),
            "wgan_cifar10": ("tanh", "mean", True, False)}


def _resnet_gan(arch, *, nz=128, ngf=256, ndf=128, weights=None):
    output, pool, layer_norm, unit_input = VARIANTS[arch]
    model = GAN(ResNetGenerator32(nz, ngf, 4, output),
                ResNetDiscriminator32(ndf, pool, layer_norm, unit_input))
    return load_into(model, arch, weights)


_TRAINING = ("Adam 2e-4, betas (0, 0.9), batch 64, n_dis 5, linear decay, 100k generator "
             "steps (MegEngine train_{dcgan,wgan}.py)")
dcgan_cifar10 = register_model("dcgan_cifar10", partial(_resnet_gan, "dcgan_cifar10"), gan_card(
    "pytorch_mimicry nets/dcgan/dcgan_cifar.py as MegEngine Models megengine_mimicry ports it "
    "(ResNet backbone, sigmoid output, non-saturating loss)",
    loss="ns", training=_TRAINING, recipe="dcgan_cifar10"))   # numbers: the manifest's entry
wgan_cifar10 = register_model("wgan_cifar10", partial(_resnet_gan, "wgan_cifar10"), gan_card(
    "MegEngine Models megengine_mimicry nets/wgan/wgan_cifar.py (WGAN-WC on mimicry's ResNet "
    "backbone; critic blocks layer-normed, weights clipped to 0.03)",
    {"megengine": {"fid": 30.5, "is": 6.7, "kid": 0.0249}}, loss="wasserstein",
    clip=0.03, training=_TRAINING, metric_source=MEGENGINE_GAN + "; no weights published",
    recipe="wgan_cifar10"))
