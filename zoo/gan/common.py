"""What every GAN of the zoo shares: the two networks as one module, the model card, and
loading published or trained weights into either half.

Conventions (read by trainers/gan.py, `tianyuan generate` and the FID evaluation):

- `GAN.generator` maps noise z (N, nz) to images (N, 3, H, W) in [-1, 1] (RGB), whatever
  its last layer; `GAN.discriminator` (a WGAN's critic too) maps such images to one logit
  or score each (N, 1). One module holds both, so a training checkpoint's "model" is one
  state dict: `generator.*`, `discriminator.*` and, when the generator is averaged
  (trainers/gan.py, `ema`), `generator_ema.*`.
- `GAN.sampler()` is the generator samples are drawn from: the averaged one if present.

>>> from tianyuan.zoo import get_model
>>> gan = get_model("dcgan_cifar10")
>>> gan.generator(gan.noise(2)).shape
(2, 3, 32, 32)
"""
import copy
import os

import tianyuan as ty
from tianyuan import nn
from tianyuan.weights.gan_maps import GAN_PREPROCESSING  # images in [-1, 1]

PARTS = ("generator", "discriminator", "generator_ema")


def gan_card(follows, metrics=None, image_size=32, nz=128, **extra):
    """A generation model card: `follows` names the reference implementation the builder
    reproduces. Published numbers come from the weights manifest at lookup
    (`zoo.model_card`); `metrics` ({source: {"fid", "is"}} on CIFAR-10) only for a reference
    that published numbers and no weights file, which the manifest cannot list."""
    card = {"task": "generation", "dataset": "CIFAR-10", "input_size": (nz,),
            "output_size": (3, image_size, image_size), "nz": nz,
            "preprocessing": dict(GAN_PREPROCESSING), "follows": follows,
            "metrics": dict(metrics or {})}
    card.update(extra)
    return card


class GAN(nn.Module):
    """A generator and its discriminator (or critic); `forward(z)` is the generator's."""

    def __init__(self, generator, discriminator):
        super().__init__()
        self.generator, self.discriminator = generator, discriminator
        self.nz = int(generator.nz)

    def forward(self, z):
        return self.generator(z)

    def noise(self, n):
        """(n, nz) standard normal noise from the framework's seeded stream."""
        return ty.randn(int(n), self.nz)

    def sampler(self):
        """The generator to draw samples from: the moving average of the weights if the
        trainer keeps one (`generator_ema`), else the generator."""
        ema = self._modules.get("generator_ema")
        return self.generator if ema is None else ema


def load_gan_weights(model, state, arch=None):
    """Load `state` ({name: array} with `generator.`/`discriminator.`/`generator_ema.`
    prefixes) into `model`, strictly per part: a generator-only file (a published
    generator, `tianyuan weights import` of one) fills the generator and leaves the
    discriminator as built. Returns the parts loaded."""
    parts = {}
    for key, value in state.items():
        part, _, rest = key.partition(".")
        if part not in PARTS or not rest:
            raise ValueError(f"{arch or type(model).__name__}: weight {key!r} is not under "
                             f"{', '.join(PARTS)} (convert foreign files with `tianyuan "
                             "weights import FILE --arch NAME --out F`)")
        parts.setdefault(part, {})[rest] = value
    if "generator_ema" in parts and "generator_ema" not in model._modules:
        model.generator_ema = copy.deepcopy(model.generator).requires_grad_(False)
    for part, values in parts.items():
        model._modules[part].load_state_dict(values)
    return sorted(parts)


def load_into(model, arch, weights=None):
    """`weights`: a manifest name or a file; None leaves the initialisation. Our own files
    (`.safetensors`: weights, best.safetensors, a training checkpoint) load as they are,
    checked by the model (any widths: `ngf=`, `ndf=`); foreign ones (`.pth`, `.pkl`) go
    through the weights name map for `arch` (weights/gan_maps.py)."""
    if weights is None:
        return model
    path = os.path.expanduser(str(weights))
    if path.endswith(".safetensors") and os.path.exists(path):
        state = ty.load(path)
        if isinstance(state, dict) and isinstance(state.get("model"), dict):
            state = state["model"]                       # a checkpoint or best.safetensors
    else:
        from tianyuan.weights import load_weights
        state = load_weights(weights, arch=arch)
    load_gan_weights(model, state, arch)
    return model
