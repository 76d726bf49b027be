"""Name maps: a foreign state dict -> our names and shapes, checked against the arch spec.

Our zoo uses torchvision's names, so the torchvision map is the identity (a leading
`module.` from DataParallel is dropped). MegEngine Models' ResNet
(official/vision/classification/resnet/model.py) has torchvision's module names; its
arrays differ in shape only (BN running stats and conv biases (1, C, 1, 1), grouped conv
weights (G, O/G, I/G, kh, kw)), which `_fit_shape` undoes. Its quantization ResNet
(official/quantization/models/resnet.py, fused `conv_bn_relu1.conv`/`.bn` names) is
renamed to ours. Megvii-layout ShuffleNets (`first_conv.*`, from MegEngine or
ShuffleNet-Series files) go through megvii_maps.py, which also permutes channels.
Every map ends in `check_against_spec`, which names all unmapped, missing and
mis-shaped keys in one error. GANs (generator/discriminator pairs) go through gan_maps.py.

>>> ours = convert_state_dict(torch_state, "resnet50", "torchvision")
"""
import re
from collections import OrderedDict

import numpy as np

from .arch_specs import CLASSIFIER_KEYS, RESNETS, SHUFFLENET_V1, SHUFFLENET_V2, state_dict_spec
from .detection_maps import convert_detection_state_dict, is_detection_arch
from .gan_maps import GAN_ARCHS, convert_gan_state_dict
from .megvii_maps import (LayoutError, is_megvii_layout, megvii_shufflenet_v1,
                          megvii_shufflenet_v2)


class NameMapError(KeyError):
    """A converted state dict does not fit the architecture (lists every bad key)."""

    def __str__(self):  # KeyError would repr() the message
        return self.args[0] if self.args else ""


def _torchvision(state, arch):
    return OrderedDict((re.sub(r"^module\.", "", k), v) for k, v in state.items())


# MegEngine's quantization ResNet fuses conv+bn into one module: `<m>.conv`, `<m>.bn`.
_QUANT_RESNET = [(r"^conv_bn_relu1\.conv\.", "conv1."), (r"^conv_bn_relu1\.bn\.", "bn1."),
                 (r"\.conv_bn(?:_relu)?(\d)\.conv\.", r".conv\1."),
                 (r"\.conv_bn(?:_relu)?(\d)\.bn\.", r".bn\1."),
                 (r"\.downsample\.conv\.", ".downsample.0."),
                 (r"\.downsample\.bn\.", ".downsample.1.")]


def _megengine_resnet(state, arch):
    if arch not in RESNETS:
        raise NameMapError(f"megengine name map: {arch} is not a ResNet or a ShuffleNet; "
                           f"MegEngine maps exist for {sorted(RESNETS)}, "
                           f"{sorted(SHUFFLENET_V2)} and {sorted(SHUFFLENET_V1)}")
    state = _torchvision(state, arch)  # same module names; shapes fixed in _fit_shape
    if "conv_bn_relu1.conv.weight" not in state:
        return state
    out = OrderedDict()
    for key, value in state.items():
        for pattern, repl in _QUANT_RESNET:
            key = re.sub(pattern, repl, key)
        out[key] = value
    return out


def _megvii(converter):
    def convert(state, arch):
        try:
            return converter(state, arch)
        except LayoutError as error:
            raise NameMapError(str(error)) from None
    return convert


NAME_MAPS = {
    "torchvision": _torchvision,
    "megengine": None,  # chosen by family below
    "ours": _torchvision,
}


def name_map_for(source, arch, state=None):
    """The function mapping `source`'s names for `arch` to ours.

    ShuffleNets in Megvii's layout (MegEngine `.pkl`, or ShuffleNet-Series `.pth`, whose
    names start with `first_conv.`) get the Megvii converters whatever the container.
    """
    if source not in NAME_MAPS:
        raise NameMapError(f"no name map for source {source!r}; known: {sorted(NAME_MAPS)}")
    megvii = source == "megengine" or (state is not None and is_megvii_layout(state))
    if megvii and arch in SHUFFLENET_V2:
        return _megvii(megvii_shufflenet_v2)
    if megvii and arch in SHUFFLENET_V1:
        return _megvii(megvii_shufflenet_v1)
    if source == "megengine":
        return _megengine_resnet
    return NAME_MAPS[source]


def unwrap_checkpoint(obj):
    """A training checkpoint's state dict (`state_dict`, `model`, ...), else `obj`."""
    for key in ("state_dict", "model_state_dict", "model", "net", "params"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            return obj[key]
    return obj


def convert_state_dict(state, arch, source="torchvision", num_classes=None, strict=True):
    """Map `state` (from `source`) to `arch`'s names; check every name and shape.

    Missing `num_batches_tracked` buffers (legacy torchvision files, MegEngine) are
    filled with 0. `num_classes` defaults to what the file's classifier says.
    """
    state = unwrap_checkpoint(state)
    if arch in GAN_ARCHS:   # generator/discriminator files, any source (gan_maps.py)
        return convert_gan_state_dict(state, arch, strict)
    if is_detection_arch(arch):   # torchvision's names, v1 keys renamed (detection_maps.py)
        return convert_detection_state_dict(state, arch, source)
    mapped = name_map_for(source, arch, state)(state, arch)
    if num_classes is None:
        num_classes = _infer_num_classes(mapped)
    spec = state_dict_spec(arch, num_classes)
    out = OrderedDict()
    for name, value in mapped.items():
        if name in spec and isinstance(value, np.ndarray):
            value = _fit_shape(value, spec[name][0])
        out[name] = value
    for name, (shape, dtype) in spec.items():
        if name.endswith("num_batches_tracked") and name not in out:
            out[name] = np.zeros(shape, dtype)
    if strict:
        check_against_spec(out, spec, f"{source} -> {arch}")
    return OrderedDict((k, out[k]) for k in spec if k in out) if strict else out


def _infer_num_classes(state):
    for key in CLASSIFIER_KEYS:
        value = state.get(key)
        if value is not None and getattr(value, "ndim", 0) == 2:
            return int(value.shape[0])
    return 1000


def _fit_shape(value, shape):
    """Squeeze singleton axes ((1, C, 1, 1) -> (C,)) or merge a grouped conv's
    (G, O/G, I/G, kh, kw) into (O, I/G, kh, kw); anything else is left for the check."""
    if value.shape == tuple(shape) or value.size != int(np.prod(shape, dtype=np.int64)):
        return value
    squeezed = tuple(d for d in value.shape if d != 1)
    if squeezed == tuple(d for d in shape if d != 1):
        return value.reshape(shape)
    if value.ndim == 5 and len(shape) == 4 and value.shape[2:] == tuple(shape[1:]):
        return value.reshape(shape)
    return value


def check_against_spec(state, spec, what):
    """Raise NameMapError naming every unmapped, missing and mis-shaped key."""
    unmapped = [k for k in state if k not in spec]
    missing = [k for k in spec if k not in state]
    misshaped = [f"{k}: file {tuple(np.shape(state[k]))}, expected {spec[k][0]}"
                 for k in spec if k in state and tuple(np.shape(state[k])) != spec[k][0]]
    if not (unmapped or missing or misshaped):
        return
    lines = [f"{what}: the weights do not fit the architecture"]
    for title, keys in (("unmapped keys (in the file, not in the model)", unmapped),
                        ("missing keys (in the model, not in the file)", missing),
                        ("mis-shaped keys", misshaped)):
        if keys:
            shown = keys[:40] + ([f"... and {len(keys) - 40} more"] if len(keys) > 40 else [])
            lines.append(f"  {len(keys)} {title}:\n    " + "\n    ".join(shown))
    raise NameMapError("\n".join(lines))
