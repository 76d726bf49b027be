"""What the zoo's top-down pose models share: the card, fuse groups that the quantizer can
take, and loading weights (a pose file, or ImageNet weights into the backbone).

The interface (what trainers/keypoints.py, the evaluator and `tianyuan pose` use):
`model(images)` with images (N, 3, H, W) normalised person crops returns (N, K, H/4, W/4)
heatmaps in [0, 1] (a file trained on 0..255 heatmaps is rescaled: `heatmap_range`);
`model.losses(images, target, target_weight)` the loss dict of one batch; `model.num_joints`.
"""
from tianyuan import nn
from tianyuan.nn.fused import fused_name, part_name

from ..classification.common import chosen_weights

# COCO's 17 joints at 256x192 crops, ImageNet statistics on RGB in 0..1 (SimpleBaseline's
# reference; MegEngine's files say their own in the manifest)
POSE_INPUT = (3, 256, 192)


def keypoint_card(input_size=POSE_INPUT, num_joints=17, **extra):
    from tianyuan.weights.preprocessing import TORCHVISION_V1
    pre = {k: TORCHVISION_V1[k] for k in ("pixel_scale", "mean", "std", "channels")}
    card = {"task": "keypoints", "dataset": "COCO-val2017 keypoints", "num_joints": num_joints,
            "input_size": tuple(input_size), "preprocessing": pre}
    card.update(extra)
    return card


def fusible(model, groups):
    """The groups nn.fused has a module for: a ConvTranspose2d + BN + ReLU group waits for
    its fused (QAT, int8) twin; until then the deconvolutions stay float modules."""
    out = []
    for group in groups:
        try:
            name = fused_name([part_name(model.get_submodule(n)) for n in group])
        except ValueError:
            continue
        if hasattr(nn.fused, name):
            out.append(group)
    return out


def seq_conv_groups(prefix, seq):
    """[conv, bn(, relu)] groups inside a Sequential whose convs are Conv2d or
    ConvTranspose2d (names `prefix.i`)."""
    mods, groups = list(seq), []
    for i, module in enumerate(mods):
        if not isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
            continue
        if i + 1 < len(mods) and isinstance(mods[i + 1], nn.BatchNorm2d):
            group = [f"{prefix}.{i}", f"{prefix}.{i + 1}"]
            if i + 2 < len(mods) and isinstance(mods[i + 2], nn.ReLU):
                group.append(f"{prefix}.{i + 2}")
            groups.append(group)
    return groups


def head_init(module, std=0.001):
    """The pose references' head init: (transposed) conv weights N(0, std), biases 0, BN 1/0."""
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class HeatmapRange:
    """A pose model's `heatmap_range` (the scale its weights' heatmaps peak at: 1, MegEngine's
    255), divided out of the output by the `heatmap_scale` module, which setting it rebuilds
    (a module, so that jit.trace records the division)."""

    @property
    def heatmap_range(self):
        return self._heatmap_range

    @heatmap_range.setter
    def heatmap_range(self, value):
        self._heatmap_range = float(value)
        self.heatmap_scale = nn.Rescale(1.0 / self._heatmap_range)

    def unscaled(self, heatmaps):
        return heatmaps if self._heatmap_range == 1.0 else self.heatmap_scale(heatmaps)


def entry_heatmap_range(weights):
    """A manifest entry's heatmap scale (MegEngine's files learnt 0..255 heatmaps), else 1."""
    if not isinstance(weights, str):
        return 1.0
    from tianyuan.weights import get_entry
    try:
        return float(get_entry(weights).preprocessing.get("heatmap_range", 1.0))
    except KeyError:      # a file, not a manifest name
        return 1.0


def load_pose_weights(model, arch, weights=None, pretrained=False, adapt=None):
    """Load a pose model's weights (manifest name or file) into `model`; `adapt(model,
    state)` first fits architectural details the file decides (a final layer's kernel).
    Returns the model."""
    weights = chosen_weights(arch, weights, pretrained)
    if weights is None:
        return model
    from tianyuan.weights import load_weights
    state = load_weights(weights, arch=arch)
    if adapt is not None:
        adapt(model, state)
    model.heatmap_range = entry_heatmap_range(weights)
    model.load_state_dict(state, strict=True)
    return model


def load_backbone_into(model, backbone_arch, weights, prefix=""):
    """ImageNet weights of `backbone_arch` (manifest name or file; True: its default entry)
    into the backbone part of `model` (names under `prefix`), the classifier left out; every
    other key of the model must be a head's (it keeps its init)."""
    if not weights:
        return model
    from tianyuan.weights import load_weights
    name = chosen_weights(backbone_arch, None, True) if weights is True else weights
    state = {prefix + k: v for k, v in load_weights(name, arch=backbone_arch).items()
             if not k.startswith("fc.")}
    ours = model.state_dict()
    strange = [k for k in state if k not in ours]
    if strange:
        raise ValueError(f"{backbone_arch} weights {name}: {len(strange)} tensors the pose "
                         f"model's backbone lacks (first {strange[0]}): weights of another "
                         "backbone?")
    model.load_state_dict(state, strict=False)
    return model
