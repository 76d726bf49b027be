"""The CNN32 GANs of pytorch-gan-collections (w86763777): `dcgan_cnn32_cifar10` and
`wgan_cnn32_cifar10`, with its module names (`main.<index>`, `linear`), so its
`{"net_G", "net_D", ...}` checkpoints load under `generator.` / `discriminator.`.

- DCGAN (source/models/dcgan.py, Generator32 / Discriminator32; Radford et al. 2016):
  z (N, 100) as a 1x1 map, five 4x4 transposed convs (2 -> 4 -> 8 -> 16 -> 32) with
  BN-ReLU between and tanh at the end; the discriminator four 5x5 stride-2 convs with
  LeakyReLU(0.2) (BN after the last three) and a linear score of the 2x2x512 map.
- WGAN (source/models/wgangp.py, Generator32 / Discriminator32, the SNGAN paper's
  "standard CNN", Miyato et al. 2018 table 3): a linear layer to 4x4x512, three BN-ReLU-
  transposed-conv ups, BN-ReLU-conv3x3-tanh; the critic seven convs with LeakyReLU(0.1)
  and a linear score of the 4x4x512 map; weights N(0, 0.02), biases 0.

Both generators return [-1, 1] images (the repository trains on (x - 0.5) / 0.5).

>>> from tianyuan.zoo import get_model
>>> get_model("dcgan_cnn32_cifar10").generator.nz
100
"""
from functools import partial

from tianyuan import nn

from ..registry import register_model
from .common import GAN, gan_card, load_into

COLLECTIONS = ("pytorch-gan-collections Readme (REFERENCE.md, GAN on CIFAR10); its checkpoints "
               "are on Google Drive, so no manifest entry holds them")


def _bn_relu_up(in_ch, out_ch, bias):
    return [nn.BatchNorm2d(in_ch), nn.ReLU(), nn.ConvTranspose2d(in_ch, out_ch, 4, 2, 1,
                                                                 bias=bias)]


class DCGANGenerator32(nn.Module):
    """z (N, nz) -> (N, 3, 32, 32): main.0 (nz -> 1024, 2x2), then 512, 256, 128, 3.

    QAT-ready: each transposed conv with the BN and ReLU after it is a fuse group
    (ConvTransposeBnReLU2d), so the int8 generator is int8 from z to the last transposed conv;
    the tanh after the DequantStub stays float (3 x 32 x 32 values an image)."""

    def __init__(self, nz=100):
        super().__init__()
        self.nz = nz
        self.quant = nn.QuantStub()
        layers = [nn.ConvTranspose2d(nz, 1024, 2, 1, 0, bias=False)]        # (N, 1024, 2, 2)
        for in_ch, out_ch in ((1024, 512), (512, 256), (256, 128), (128, 3)):
            layers += _bn_relu_up(in_ch, out_ch, bias=False)                # x2 each
        self.main = nn.Sequential(*layers)
        self.dequant = nn.DequantStub()
        self.tanh = nn.Tanh()

    def fuse_groups(self):
        """[main.0, main.1, main.2], [main.3, main.4, main.5], ...: ConvTranspose-BN-ReLU."""
        return [[f"main.{i}", f"main.{i + 1}", f"main.{i + 2}"] for i in range(0, 12, 3)]

    def forward(self, z):
        x = self.quant(z.reshape(z.shape[0], self.nz, 1, 1))               # (N, nz, 1, 1)
        return self.tanh(self.dequant(self.main(x)))


class DCGANDiscriminator32(nn.Module):
    """(N, 3, 32, 32) -> (N, 1): 5x5 stride-2 convs 64, 128, 256, 512 (-> 2x2)."""

    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(3, 64, 5, 2, 2, bias=False), nn.LeakyReLU(0.2)]
        for in_ch, out_ch in ((64, 128), (128, 256), (256, 512)):
            layers += [nn.Conv2d(in_ch, out_ch, 5, 2, 2, bias=False), nn.LeakyReLU(0.2),
                       nn.BatchNorm2d(out_ch)]
        self.main = nn.Sequential(*layers)
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(2 * 2 * 512, 1)

    def forward(self, x):
        return self.linear(self.flatten(self.main(x)))


def _normal_init(module):
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            nn.init.zeros_(m.bias)
    return module


class WGANGenerator32(nn.Module):
    """z (N, nz) -> linear 4x4x512 -> 256, 128, 64 (x2 each) -> conv3x3 to RGB, tanh.

    QAT-ready as DCGANGenerator32: the first BN-ReLU (after the linear layer, no conv to fold
    into) is a BnReLU2d group, int8 as a depthwise 1x1 conv; then three ConvTranspose-BN-ReLU
    groups and the 3x3 conv, int8; tanh float after the DequantStub."""

    def __init__(self, nz=100):
        super().__init__()
        self.nz = nz
        self.quant = nn.QuantStub()
        self.linear = nn.Linear(nz, 4 * 4 * 512)
        layers = []
        for in_ch, out_ch in ((512, 256), (256, 128), (128, 64)):
            layers += _bn_relu_up(in_ch, out_ch, bias=True)
        self.main = nn.Sequential(*layers, nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.Conv2d(64, 3, 3, 1, 1))
        self.dequant = nn.DequantStub()
        self.tanh = nn.Tanh()
        _normal_init(self)

    def fuse_groups(self):
        """[main.0, main.1] (BN-ReLU), then ConvTranspose-BN-ReLU from main.2, .5, .8."""
        return [["main.0", "main.1"]] + [[f"main.{i}", f"main.{i + 1}", f"main.{i + 2}"]
                                         for i in (2, 5, 8)]

    def forward(self, z):
        x = self.linear(self.quant(z)).reshape(z.shape[0], 512, 4, 4)      # (N, 512, 4, 4)
        return self.tanh(self.dequant(self.main(x)))


class WGANDiscriminator32(nn.Module):
    """(N, 3, 32, 32) -> (N, 1): conv3x3 / conv4x4-stride-2 pairs 64-128, 128-256,
    256-512, a last conv3x3 512, LeakyReLU(0.1) after each, linear on 4x4x512."""

    def __init__(self):
        super().__init__()
        layers, in_ch = [], 3
        for width, out_ch in ((64, 128), (128, 256), (256, 512)):
            layers += [nn.Conv2d(in_ch, width, 3, 1, 1), nn.LeakyReLU(0.1),
                       nn.Conv2d(width, out_ch, 4, 2, 1), nn.LeakyReLU(0.1)]
            in_ch = out_ch
        self.main = nn.Sequential(*layers, nn.Conv2d(512, 512, 3, 1, 1), nn.LeakyReLU(0.1))
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(4 * 4 * 512, 1)
        _normal_init(self)

    def forward(self, x):
        return self.linear(self.flatten(self.main(x)))


PAIRS = {"dcgan_cnn32_cifar10": (DCGANGenerator32, DCGANDiscriminator32),
         "wgan_cnn32_cifar10": (WGANGenerator32, WGANDiscriminator32)}


def _cnn32_gan(arch, *, nz=100, weights=None):
    generator, discriminator = PAIRS[arch]
    return load_into(GAN(generator(nz), discriminator()), arch, weights)


_TRAINING = ("Adam 2e-4, betas ({beta1}, 0.9), batch 128 (generator steps 256), n_dis 1, "
             "linear decay, 100k steps, flip (configs/{config}_CIFAR10{cnn}.txt)")
dcgan_cnn32_cifar10 = register_model(
    "dcgan_cnn32_cifar10", partial(_cnn32_gan, "dcgan_cnn32_cifar10"), gan_card(
        "pytorch-gan-collections source/models/dcgan.py (CNN32)",
        {"pytorch-gan-collections": {"fid": 42.72, "is": 6.01}}, nz=100, loss="ns",
        training=_TRAINING.format(beta1=0.5, config="DCGAN", cnn=""),
        metric_source=COLLECTIONS, recipe="dcgan_cnn32_cifar10"))
wgan_cnn32_cifar10 = register_model(
    "wgan_cnn32_cifar10", partial(_cnn32_gan, "wgan_cnn32_cifar10"), gan_card(
        "pytorch-gan-collections source/models/wgangp.py (CNN32) as wgan.py trains it "
        "(weights clipped to 0.1)",
        {"pytorch-gan-collections": {"fid": 40.03, "is": 6.62}}, nz=100, loss="wasserstein",
        clip=0.1, training=_TRAINING.format(beta1=0.0, config="WGAN", cnn="_CNN"),
        metric_source=COLLECTIONS, recipe="wgan_cnn32_cifar10"))
