"""Pose state dicts (SimpleBaseline, MSPN) -> the zoo's names.

The zoo's SimpleBaseline has the official release's names (Xiao et al.'s
`pose_resnet_*_256x192.pth.tar`: `conv1`, `bn1`, `layer1-4`, `deconv_layers.{0,1,3,4,6,7}`,
`final_layer`), so those files map by identity, less a DataParallel `module.` (a
`state_dict` key is unwrapped before). Two other layouts are renamed:

    MegEngine Models (simplebaseline.py)   backbone.*              -> *
                                           deconv_layers.body.*    -> deconv_layers.*
                                           last_layer.* (3x3)      -> final_layer.*
    MMPose (TopDown + TopdownHeatmapSimpleHead)
                                           backbone.*              -> *
                                           keypoint_head.*         -> *

The zoo's MSPN has MegEngine's names (zoo/keypoints/mspn.py), so MegEngine's files map by
identity. MegEngine's arrays are undone to torch's shapes (a BatchNorm's arrays and conv
biases (1, C, 1, 1) -> (C,); name_maps.megengine_layout); its ConvTranspose2d weights are
(in, out, kh, kw) as ours. BatchNorms without `num_batches_tracked` get a 0. weights never
imports zoo: which archs are pose models is said by name (KEYPOINT_PREFIXES).

>>> is_keypoint_arch("simplebaseline_res50"), is_keypoint_arch("resnet50")
(True, False)
"""
import re
from collections import OrderedDict

KEYPOINT_PREFIXES = ("simplebaseline_", "mspn_")

_RENAMES = (
    (r"^module\.", ""),
    (r"^backbone\.", ""),                     # MegEngine's and MMPose's SimpleBaseline
    (r"^keypoint_head\.", ""),                # MMPose's head
    (r"^deconv_layers\.body\.", "deconv_layers."),
    (r"^last_layer\.", "final_layer."),
)


def is_keypoint_arch(arch):
    return str(arch).startswith(KEYPOINT_PREFIXES)


def convert_keypoint_state_dict(state, arch, source="torchvision"):
    """`state` (official, MegEngine or MMPose names) -> the zoo's names for pose model `arch`,
    in the file's order. `source`: "torchvision" (a .pth), "megengine" (a .pkl) or "ours"."""
    from .name_maps import megengine_layout, with_num_batches_tracked   # (name_maps imports us)
    if source not in ("torchvision", "megengine", "ours"):
        raise ValueError(f"keypoint map: {arch} weights convert from torchvision, megengine "
                         f"or our names, not {source!r}")
    renames = _RENAMES if arch.startswith("simplebaseline_") else _RENAMES[:1]
    out = OrderedDict()
    for key, value in state.items():
        if key.endswith("fc.weight") or key.endswith("fc.bias"):
            continue              # an ImageNet head left in a pose file (MegEngine deletes it)
        for pattern, repl in renames:
            key = re.sub(pattern, repl, key)
        if key in out:
            raise ValueError(f"keypoint map: two of the file's tensors map to {key!r}: not a "
                             f"{arch} file")
        out[key] = value
    if source == "megengine":
        out = megengine_layout(out)
    return with_num_batches_tracked(out)
