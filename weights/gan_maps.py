"""The GANs' state-dict spec and name map: published generator/discriminator files -> the
zoo's `GAN` module (zoo/gan/), whose state dict is `generator.*` + `discriminator.*` (+
`generator_ema.*` when the trainer averaged the generator).

What a file may hold, all mapped by `convert_gan_state_dict`:

- ours: a `GAN` state dict, a training checkpoint's "model", or only its generator part;
- a pair checkpoint of pytorch-gan-collections: `{"net_G": {...}, "net_D": {...},
  "optim_G": ...}` (the optimizer and schedule states are left out);
- one network's state dict: MegEngine Models' `dcgan_cifar.pkl` (its generator), a
  pytorch_mimicry `netG`/`netD` checkpoint (`model_state_dict`, unwrapped by the loader).
  Which half it is comes from its names, which are the references' own (`l1`,
  `block2.c1`, `b5`, `c5` / `block1.c_sc`, `l5`; CNN32: `main.<index>`, `linear`).

MegEngine's (1, C, 1, 1) biases and BN arrays are reshaped and missing
`num_batches_tracked` filled with 0, as for the classifiers (name_maps.py); every name and
shape is then checked against `gan_spec`. The zoo's tests build each model and compare
its state dict with this spec.

>>> spec = gan_spec("dcgan_cifar10")
>>> spec["generator.l1.weight"], spec["discriminator.l5.weight"]
(((4096, 128), 'float32'), ((1, 128), 'float32'))
"""
from collections import OrderedDict

import numpy as np

from .preprocessing import GAN_PREPROCESSING  # noqa: F401  (the zoo's GAN cards read it here)

PARTS = ("generator", "discriminator")
# pytorch-gan-collections' checkpoint keys -> our parts
PAIR_KEYS = {"net_G": "generator", "net_D": "discriminator"}
RESNET_GANS = {"dcgan_cifar10": (128, 256, 128), "wgan_cifar10": (128, 256, 128)}  # nz, ngf, ndf
# CNN32 layer tables: (index in `main`, kind, in, out, kernel, bias); kind conv, convT or bn
_DCGAN_G = [(0, "convT", 100, 1024, 2, False), (1, "bn", 1024), (3, "convT", 1024, 512, 4, False),
            (4, "bn", 512), (6, "convT", 512, 256, 4, False), (7, "bn", 256),
            (9, "convT", 256, 128, 4, False), (10, "bn", 128), (12, "convT", 128, 3, 4, False)]
_DCGAN_D = [(0, "conv", 3, 64, 5, False), (2, "conv", 64, 128, 5, False), (4, "bn", 128),
            (5, "conv", 128, 256, 5, False), (7, "bn", 256), (8, "conv", 256, 512, 5, False),
            (10, "bn", 512)]
_WGAN_G = [(0, "bn", 512), (2, "convT", 512, 256, 4, True), (3, "bn", 256),
           (5, "convT", 256, 128, 4, True), (6, "bn", 128), (8, "convT", 128, 64, 4, True),
           (9, "bn", 64), (11, "conv", 64, 3, 3, True)]
_WGAN_D = [(i, "conv", c_in, c_out, k, True) for i, c_in, c_out, k in
           ((0, 3, 64, 3), (2, 64, 128, 4), (4, 128, 128, 3), (6, 128, 256, 4),
            (8, 256, 256, 3), (10, 256, 512, 4), (12, 512, 512, 3))]
# arch -> (generator layers, its linear (out, in) or None, discriminator layers, linear in)
CNN32_GANS = {"dcgan_cnn32_cifar10": (_DCGAN_G, None, _DCGAN_D, 2 * 2 * 512),
              "wgan_cnn32_cifar10": (_WGAN_G, (4 * 4 * 512, 100), _WGAN_D, 4 * 4 * 512)}
GAN_ARCHS = tuple(sorted(RESNET_GANS) + sorted(CNN32_GANS))


def _conv(spec, name, out_ch, in_ch, k, bias=True, transposed=False):
    shape = (in_ch, out_ch, k, k) if transposed else (out_ch, in_ch, k, k)
    spec[f"{name}.weight"] = (shape, "float32")
    if bias:
        spec[f"{name}.bias"] = ((out_ch,), "float32")


def _bn(spec, name, ch):
    for field in ("weight", "bias", "running_mean", "running_var"):
        spec[f"{name}.{field}"] = ((ch,), "float32")
    spec[f"{name}.num_batches_tracked"] = ((), "int64")


def _linear(spec, name, out_f, in_f):
    spec[f"{name}.weight"] = ((out_f, in_f), "float32")
    spec[f"{name}.bias"] = ((out_f,), "float32")


def _resnet_generator(nz, ngf):
    spec = OrderedDict()
    _linear(spec, "l1", 4 * 4 * ngf, nz)
    for block in ("block2", "block3", "block4"):       # up-blocks with a 1x1 shortcut
        _bn(spec, f"{block}.b1", ngf)
        _conv(spec, f"{block}.c1", ngf, ngf, 3)
        _bn(spec, f"{block}.b2", ngf)
        _conv(spec, f"{block}.c2", ngf, ngf, 3)
        _conv(spec, f"{block}.c_sc", ngf, ngf, 1)
    _bn(spec, "b5", ngf)
    _conv(spec, "c5", 3, ngf, 3)
    return spec


def _resnet_discriminator(ndf):
    spec = OrderedDict()
    for block, in_ch, shortcut in (("block1", 3, True), ("block2", ndf, True),
                                   ("block3", ndf, False), ("block4", ndf, False)):
        _conv(spec, f"{block}.c1", ndf, in_ch if block == "block1" else ndf, 3)
        _conv(spec, f"{block}.c2", ndf, ndf, 3)
        if shortcut:
            _conv(spec, f"{block}.c_sc", ndf, in_ch, 1)
    _linear(spec, "l5", 1, ndf)
    return spec


def _cnn32(layers, linear=None, linear_name="linear", linear_first=True):
    spec = OrderedDict()
    if linear is not None and linear_first:
        _linear(spec, linear_name, *linear)
    for index, kind, *shape in layers:
        if kind == "bn":
            _bn(spec, f"main.{index}", shape[0])
        else:
            c_in, c_out, k, bias = shape
            _conv(spec, f"main.{index}", c_out, c_in, k, bias, transposed=kind == "convT")
    if linear is not None and not linear_first:
        _linear(spec, linear_name, *linear)
    return spec


def part_specs(arch):
    """{"generator": spec, "discriminator": spec} of `arch`, each in the reference's names."""
    if arch in RESNET_GANS:
        nz, ngf, ndf = RESNET_GANS[arch]
        return {"generator": _resnet_generator(nz, ngf),
                "discriminator": _resnet_discriminator(ndf)}
    if arch in CNN32_GANS:
        gen, gen_linear, dis, dis_in = CNN32_GANS[arch]
        return {"generator": _cnn32(gen, gen_linear),
                "discriminator": _cnn32(dis, (1, dis_in), linear_first=False)}
    raise KeyError(f"gan_spec: unknown GAN {arch!r}; known: {list(GAN_ARCHS)}")


def gan_spec(arch, parts=PARTS):
    """OrderedDict {name: (shape, dtype name)} of the `GAN` state dict of `arch` (the given
    parts; "generator_ema" has the generator's shapes)."""
    specs = part_specs(arch)
    specs["generator_ema"] = specs["generator"]
    return OrderedDict((f"{part}.{name}", value) for part in parts
                       for name, value in specs[part].items())


def split_parts(state, arch):
    """{part: {name: value}} of a file's state dict, in the reference's names per part."""
    state = OrderedDict((k[len("module."):] if k.startswith("module.") else k, v)
                        for k, v in state.items())
    if any(key in state for key in PAIR_KEYS):            # pytorch-gan-collections
        return {part: dict(state[key]) for key, part in PAIR_KEYS.items() if key in state}
    ours = {}
    for key, value in state.items():
        part, _, rest = key.partition(".")
        if part in PARTS + ("generator_ema",) and rest:
            ours.setdefault(part, {})[rest] = value
    if ours:
        return ours
    names = {k for k in state if not k.endswith("num_batches_tracked")}
    for part, spec in part_specs(arch).items():             # one network's file
        if names == {k for k in spec if not k.endswith("num_batches_tracked")}:
            return {part: dict(state)}
    return {"unrecognised": dict(state)}


def convert_gan_state_dict(state, arch, strict=True):
    """`state` (any layout above) as `arch`'s `GAN` names and shapes, checked."""
    from .name_maps import _fit_shape, check_against_spec
    parts = split_parts(state, arch)
    spec = gan_spec(arch, [p for p in parts if p != "unrecognised"] or ["generator"])
    out = OrderedDict()
    for part, values in parts.items():
        for name, value in values.items():
            key = f"{part}.{name}"
            if key in spec and isinstance(value, np.ndarray):
                value = _fit_shape(value, spec[key][0])
            out[key] = value
    for name, (shape, dtype) in spec.items():
        if name.endswith("num_batches_tracked") and name not in out:
            out[name] = np.zeros(shape, dtype)
    if strict:
        check_against_spec(out, spec, f"{arch} ({', '.join(parts)})")
    return OrderedDict((k, out[k]) for k in spec if k in out) if strict else out
