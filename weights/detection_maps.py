"""Detection state dicts (torchvision's detectors) -> the zoo's names, which are torchvision's.

The zoo's detectors use torchvision's current (version 2) module names, so a file saved by a
recent torchvision maps by identity (less a DataParallel `module.`). Older files, the
published v1 COCO weights among them, name some convs without the Sequential they now sit
in; torchvision renames them on load when the module's `_metadata` version is below 2
(REFERENCE.md 1e), and so does this map (no version at all counts as old, as torchvision's
loader treats a file without `_metadata`):

    backbone.fpn.{inner,layer}_blocks.{i}.{weight,bias}  -> ...{i}.0.{weight,bias}
    head.{classification,regression}_head.conv.{2k}.*    -> ...conv.{k}.0.*   (k = 0..3)
    rpn.head.conv.{weight,bias}                          -> rpn.head.conv.0.0.*

FrozenBatchNorm2d keeps no `num_batches_tracked`, so none is added. weights never imports
zoo: which archs are detectors is said by name (DETECTION_PREFIXES).

>>> is_detection_arch("retinanet_resnet50_fpn")
True
"""
import re
from collections import OrderedDict

DETECTION_PREFIXES = ("retinanet_", "fasterrcnn_", "maskrcnn_", "keypointrcnn_")

# (module prefix whose _metadata version decides, old key pattern, new key); the pattern is
# matched after the prefix
_V1_RENAMES = (
    ("backbone.fpn", r"^(inner_blocks|layer_blocks)\.(\d+)\.(weight|bias)$", r"\1.\2.0.\3"),
    ("head.classification_head", r"^conv\.(\d+)\.(weight|bias)$", None),
    ("head.regression_head", r"^conv\.(\d+)\.(weight|bias)$", None),
    ("rpn.head", r"^conv\.(weight|bias)$", r"conv.0.0.\1"),
)


def is_detection_arch(arch):
    return str(arch).startswith(DETECTION_PREFIXES)


def _head_conv(match):
    """conv.{2k} (a conv in torchvision's old conv/ReLU Sequential) -> conv.{k}.0."""
    index = int(match.group(1))
    if index % 2:
        raise ValueError(f"detection map: conv.{index} is a ReLU's index in the v1 head; "
                         "the file is not a torchvision RetinaNet head")
    return f"conv.{index // 2}.0.{match.group(2)}"


def _version(metadata, prefix):
    entry = metadata.get(prefix) if metadata else None
    return entry.get("version") if isinstance(entry, dict) else None


def convert_detection_state_dict(state, arch, source="torchvision"):
    """`state` (torchvision's detector names, any version) -> ours, in the file's order; the
    arrays themselves are not copied. `source` "torchvision" or "ours" (the same names)."""
    if source not in ("torchvision", "ours"):
        raise ValueError(f"detection map: {arch} weights convert from torchvision's names "
                         f"(or MegEngine's, megengine_detection.py), not {source!r}")
    metadata = getattr(state, "_metadata", None) or {}
    metadata = {re.sub(r"^module\.", "", k): v for k, v in metadata.items()}
    out = OrderedDict()
    for key, value in state.items():
        key = re.sub(r"^module\.", "", key)
        out[_renamed(key, metadata)] = value
    return out


def _renamed(key, metadata):
    for prefix, pattern, new in _V1_RENAMES:
        if not key.startswith(prefix + "."):
            continue
        version = _version(metadata, prefix)
        if version is not None and version >= 2:
            return key
        rest = key[len(prefix) + 1:]
        match = re.match(pattern, rest)
        if match:
            return f"{prefix}.{_head_conv(match) if new is None else match.expand(new)}"
    return key
