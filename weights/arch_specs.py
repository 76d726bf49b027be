"""Expected state-dict names and shapes of the classification zoo (and Inception-v3, from
inception_maps.py), from data tables.

The zoo uses torchvision's names (REFERENCE.md 1e), so a converter can check a file
against these without building a model (and `weights` never imports `zoo`). The zoo's
tests can compare `model.state_dict()` against `state_dict_spec(arch)`.

>>> spec = state_dict_spec("resnet18")
>>> spec["layer2.0.downsample.0.weight"]
((128, 64, 1, 1), 'float32')
"""
from collections import OrderedDict

import numpy as np

from .inception_maps import INCEPTIONS, inception_spec

RESNETS = {  # arch -> (block, repeats); block expansion 1 (basic) or 4 (bottleneck)
    "resnet18": ("basic", [2, 2, 2, 2]), "resnet34": ("basic", [3, 4, 6, 3]),
    "resnet50": ("bottleneck", [3, 4, 6, 3]), "resnet101": ("bottleneck", [3, 4, 23, 3]),
    "resnet152": ("bottleneck", [3, 8, 36, 3]),
}
# MobileNetV2 inverted residual rows (t, c, n, s), from the paper's table 2.
MOBILENET_V2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]
SHUFFLENET_V2 = {  # arch -> stage widths (stages 2-4) and conv5 width; repeats [4, 8, 4]
    "shufflenet_v2_x0_5": ([48, 96, 192], 1024), "shufflenet_v2_x1_0": ([116, 232, 464], 1024),
    "shufflenet_v2_x1_5": ([176, 352, 704], 1024), "shufflenet_v2_x2_0": ([244, 488, 976], 2048),
}
# arch -> (groups, [stem, stage2, stage3, stage4] widths): the zoo's registered V1 variants,
# whose widths equal Megvii's released tables (megvii-model/ShuffleNet-Series network.py)
_V1_WIDTHS = {3: {"0_5": [12, 120, 240, 480], "1_0": [24, 240, 480, 960],
                  "1_5": [24, 360, 720, 1440], "2_0": [48, 480, 960, 1920]},
              8: {"0_5": [16, 192, 384, 768], "1_0": [24, 384, 768, 1536],
                  "1_5": [24, 576, 1152, 2304], "2_0": [48, 768, 1536, 3072]}}
SHUFFLENET_V1 = {f"shufflenet_v1_x{w}_g{g}": (g, widths)
                 for g, table in _V1_WIDTHS.items() for w, widths in table.items()}
# (not the generic `shufflenet_v1` builder: its groups/width_mult kwargs change the shapes)
CLASSIFIER_KEYS = {"fc.weight", "classifier.1.weight"}  # first dim is num_classes


def _conv(spec, name, out_ch, in_ch, k, bias=False):
    spec[f"{name}.weight"] = ((out_ch, in_ch, k, k), "float32")
    if bias:
        spec[f"{name}.bias"] = ((out_ch,), "float32")


def _bn(spec, name, ch):
    for field in ("weight", "bias", "running_mean", "running_var"):
        spec[f"{name}.{field}"] = ((ch,), "float32")
    spec[f"{name}.num_batches_tracked"] = ((), "int64")


def _linear(spec, name, out_f, in_f):
    spec[f"{name}.weight"] = ((out_f, in_f), "float32")
    spec[f"{name}.bias"] = ((out_f,), "float32")


def _resnet(block, repeats, num_classes):
    spec = OrderedDict()
    _conv(spec, "conv1", 64, 3, 7)
    _bn(spec, "bn1", 64)
    expansion = 1 if block == "basic" else 4
    in_ch = 64
    for stage, (n, width) in enumerate(zip(repeats, [64, 128, 256, 512]), start=1):
        for i in range(n):
            prefix = f"layer{stage}.{i}"
            stride = 2 if (i == 0 and stage > 1) else 1
            if block == "basic":
                convs = [(width, in_ch, 3), (width, width, 3)]
            else:
                convs = [(width, in_ch, 1), (width, width, 3), (width * 4, width, 1)]
            for j, (o, c, k) in enumerate(convs, start=1):
                _conv(spec, f"{prefix}.conv{j}", o, c, k)
                _bn(spec, f"{prefix}.bn{j}", o)
            if stride != 1 or in_ch != width * expansion:
                _conv(spec, f"{prefix}.downsample.0", width * expansion, in_ch, 1)
                _bn(spec, f"{prefix}.downsample.1", width * expansion)
            in_ch = width * expansion
    _linear(spec, "fc", num_classes, 512 * expansion)
    return spec


def _mobilenet_v2(num_classes):
    spec = OrderedDict()
    _conv(spec, "features.0.0", 32, 3, 3)
    _bn(spec, "features.0.1", 32)
    index, in_ch = 1, 32
    for t, c, n, _s in MOBILENET_V2:
        for _ in range(n):
            hidden, prefix = in_ch * t, f"features.{index}.conv"
            names = ["0.0", "0.1", "1", "2"] if t == 1 else ["1.0", "1.1", "2", "3"]
            if t != 1:
                _conv(spec, f"{prefix}.0.0", hidden, in_ch, 1)
                _bn(spec, f"{prefix}.0.1", hidden)
            _conv(spec, f"{prefix}.{names[0]}", hidden, 1, 3)  # depthwise: (C, 1, 3, 3)
            _bn(spec, f"{prefix}.{names[1]}", hidden)
            _conv(spec, f"{prefix}.{names[2]}", c, hidden, 1)
            _bn(spec, f"{prefix}.{names[3]}", c)
            index, in_ch = index + 1, c
    _conv(spec, f"features.{index}.0", 1280, in_ch, 1)
    _bn(spec, f"features.{index}.1", 1280)
    _linear(spec, "classifier.1", num_classes, 1280)
    return spec


def _shufflenet_v2(widths, last, num_classes):
    spec = OrderedDict()
    _conv(spec, "conv1.0", 24, 3, 3)
    _bn(spec, "conv1.1", 24)
    in_ch = 24
    for stage, (n, width) in enumerate(zip([4, 8, 4], widths), start=2):
        half = width // 2
        for i in range(n):
            prefix = f"stage{stage}.{i}"
            if i == 0:  # stride 2: branch1 sees the whole input
                _conv(spec, f"{prefix}.branch1.0", in_ch, 1, 3)
                _bn(spec, f"{prefix}.branch1.1", in_ch)
                _conv(spec, f"{prefix}.branch1.2", half, in_ch, 1)
                _bn(spec, f"{prefix}.branch1.3", half)
            _conv(spec, f"{prefix}.branch2.0", half, in_ch if i == 0 else half, 1)
            _bn(spec, f"{prefix}.branch2.1", half)
            _conv(spec, f"{prefix}.branch2.3", half, 1, 3)
            _bn(spec, f"{prefix}.branch2.4", half)
            _conv(spec, f"{prefix}.branch2.5", half, half, 1)
            _bn(spec, f"{prefix}.branch2.6", half)
        in_ch = width
    _conv(spec, "conv5.0", last, in_ch, 1)
    _bn(spec, "conv5.1", last)
    _linear(spec, "fc", num_classes, last)
    return spec


def _shufflenet_v1(groups, widths, num_classes):
    spec = OrderedDict()
    _conv(spec, "conv1.0", widths[0], 3, 3)
    _bn(spec, "conv1.1", widths[0])
    in_ch = widths[0]
    for stage, (n, width) in enumerate(zip([4, 8, 4], widths[1:]), start=2):
        for i in range(n):
            prefix, mid = f"stage{stage}.{i}", width // 4
            branch_out = width - in_ch if i == 0 else width   # stride 2 concats its input
            first = stage == 2 and i == 0                       # ungrouped: few stem channels
            _conv(spec, f"{prefix}.conv1", mid, in_ch if first else in_ch // groups, 1)
            _bn(spec, f"{prefix}.bn1", mid)
            _conv(spec, f"{prefix}.conv2", mid, 1, 3)           # depthwise
            _bn(spec, f"{prefix}.bn2", mid)
            _conv(spec, f"{prefix}.conv3", branch_out, mid // groups, 1)
            _bn(spec, f"{prefix}.bn3", branch_out)
            in_ch = width
    _linear(spec, "fc", num_classes, in_ch)
    return spec


def known_archs():
    return (sorted(RESNETS) + ["mobilenet_v2"] + sorted(SHUFFLENET_V2)
            + sorted(SHUFFLENET_V1) + sorted(INCEPTIONS))


def state_dict_spec(arch, num_classes=1000):
    """OrderedDict {name: (shape, dtype name)} of `arch`'s state dict."""
    if arch in RESNETS:
        return _resnet(*RESNETS[arch], num_classes)
    if arch == "mobilenet_v2":
        return _mobilenet_v2(num_classes)
    if arch in SHUFFLENET_V2:
        return _shufflenet_v2(*SHUFFLENET_V2[arch], num_classes)
    if arch in SHUFFLENET_V1:
        return _shufflenet_v1(*SHUFFLENET_V1[arch], num_classes)
    if arch in INCEPTIONS:   # inception_maps.py; fid_inception_v3 has 1008 classes
        return inception_spec(arch, num_classes)
    raise KeyError(f"state_dict_spec: unknown arch {arch!r}; known: {known_archs()}")


def random_state_dict(arch, num_classes=1000, seed=0):
    """A synthetic state dict with `arch`'s names and shapes (for tests and demos)."""
    rng = np.random.default_rng(seed)
    out = OrderedDict()
    for name, (shape, dtype) in state_dict_spec(arch, num_classes).items():
        if dtype == "int64":
            out[name] = np.asarray(rng.integers(0, 1000), np.int64)
        elif name.endswith("running_var"):
            out[name] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32) * 0.1
    return out
