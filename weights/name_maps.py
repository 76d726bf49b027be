"""Name maps: a foreign state dict -> our names and shapes, checked against a spec.

Our zoo uses torchvision's names, so the torchvision map is the identity (a leading
`module.` from DataParallel is dropped). MegEngine Models' ResNet
(official/vision/classification/resnet/model.py) has torchvision's module names; its
arrays differ in shape only (BN arrays and conv biases (1, C, 1, 1), grouped conv
weights (G, O/G, I/G, kh, kw)), which `megengine_layout` undoes. Its quantization ResNet
(official/quantization/models/resnet.py, fused `conv_bn_relu1.conv`/`.bn` names) is
renamed to ours. Megvii-layout ShuffleNets (`first_conv.*`, from MegEngine or
ShuffleNet-Series files) go through megvii_maps.py, which also permutes channels. GANs
(generator/discriminator pairs) go through gan_maps.py; MegEngine's RetinaNet and Faster
R-CNN (`backbone.bottom_up.*`) through megengine_detection.py. A BatchNorm without
`num_batches_tracked` (legacy torchvision files, MegEngine) gets a 0.

The maps need no architecture tables. Given a spec (the zoo's model's, `specs.spec_of`;
or one kept here, `specs.state_dict_spec`), the result is checked against it by
`check_against_spec`, which names all unmapped, missing and mis-shaped keys in one error;
without one, loading it into the model checks it (`Module.load_state_dict` names them too).

>>> ours = convert_state_dict(torch_state, "resnet50", "torchvision", spec=spec_of(model))
"""
import re
from collections import OrderedDict

import numpy as np

from .detection_maps import convert_detection_state_dict, is_detection_arch
from .gan_maps import GAN_ARCHS, convert_gan_state_dict
from .keypoint_maps import convert_keypoint_state_dict, is_keypoint_arch
from .megengine_detection import convert_megengine_detection, is_megengine_detection
from .megvii_maps import (LayoutError, is_megvii_layout, megvii_shufflenet_v1,
                          megvii_shufflenet_v2)
from .specs import CLASSIFIER_KEYS, known_archs, state_dict_spec


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
    if not arch.startswith("resnet"):
        raise NameMapError(f"megengine name map: {arch} is not a ResNet or a ShuffleNet; "
                           "MegEngine maps exist for the ResNets and the ShuffleNets")
    state = megengine_layout(_torchvision(state, arch))  # same module names, torch shapes
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
    if megvii and arch.startswith("shufflenet_v2"):
        return _megvii(megvii_shufflenet_v2)
    if megvii and arch.startswith("shufflenet_v1"):
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


def convert_state_dict(state, arch, source="torchvision", num_classes=None, strict=True,
                       spec=None):
    """Map `state` (from `source`) to `arch`'s names; with a spec, check every name and shape.

    `spec`: the target's {name: (shape, dtype)} (the zoo's model's, `spec_of(model)`); else
    the one kept for `arch` if any (`known_archs()`, sized for `num_classes`, by default
    what the file's classifier says). Missing `num_batches_tracked` buffers (legacy
    torchvision files, MegEngine) are filled with 0. With a spec and `strict`, the result
    is checked and in the spec's order.
    """
    state = unwrap_checkpoint(state)
    if arch in GAN_ARCHS:   # generator/discriminator files, any source (gan_maps.py)
        return convert_gan_state_dict(state, arch, strict)
    if is_detection_arch(arch) and (source == "megengine" or is_megengine_detection(state)):
        mapped = convert_megengine_detection(state, arch, num_classes, spec)   # its own module
        return _checked(mapped, spec, strict, f"megengine -> {arch}")
    if is_detection_arch(arch):   # torchvision's names, v1 keys renamed (detection_maps.py)
        return convert_detection_state_dict(state, arch, source)
    if is_keypoint_arch(arch):   # official / MegEngine / MMPose pose files (keypoint_maps.py)
        return convert_keypoint_state_dict(state, arch, source)
    mapped = name_map_for(source, arch, state)(state, arch)
    if spec is None and arch in known_archs():
        spec = state_dict_spec(arch, num_classes or infer_num_classes(mapped))
    if spec is None:
        return with_num_batches_tracked(mapped)
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


def _checked(state, spec, strict, what):
    """`state` checked against `spec` and in its order (with a spec and strict), else as is."""
    if spec is None or not strict:
        return state
    check_against_spec(state, spec, what)
    return OrderedDict((k, state[k]) for k in spec)


def with_num_batches_tracked(state):
    """`state` with a 0 `num_batches_tracked` after each BatchNorm's running_var that lacks
    one (legacy torchvision files, MegEngine's), as torchvision's own loader fills it; one
    stored as (1,) (a writer's np.ascontiguousarray) becomes the 0-d counter it is."""
    out = OrderedDict()
    for name, value in state.items():
        if name.endswith("num_batches_tracked") and np.shape(value) == (1,):
            value = np.asarray(value).reshape(())
        out[name] = value
        prefix = name[:-len("running_var")]
        if name.endswith(".running_var") and prefix + "num_batches_tracked" not in state:
            out[prefix + "num_batches_tracked"] = np.zeros((), np.int64)
    return out


def megengine_layout(state):
    """MegEngine's array shapes as torch's: grouped conv weights (G, O/G, I/G, kh, kw) ->
    (O, I/G, kh, kw); a BatchNorm's arrays and conv biases (1, C, 1, 1) -> (C,)."""
    norms = {k[:-len("running_mean")] for k in state if k.endswith(".running_mean")}
    out = OrderedDict()
    for key, value in state.items():
        if isinstance(value, np.ndarray) and value.ndim == 5:
            value = value.reshape((-1,) + value.shape[2:])
        elif (isinstance(value, np.ndarray) and value.ndim == 4 and value.shape[0] == 1
              and value.shape[2:] == (1, 1)
              and (key.endswith(".bias") or key.rpartition(".")[0] + "." in norms)):
            value = value.reshape(-1)
        out[key] = value
    return out


def infer_num_classes(state):
    """The classifier's rows in a state dict in our names (`CLASSIFIER_KEYS`), else 1000."""
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
