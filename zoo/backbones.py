"""Backbones: a classification network's stem and stages, giving its stage features, so that
FPN, detection and pose heads build on the zoo instead of copying it.

A backbone's `forward_features(x)` returns `{"C2": ..., "C3": ..., "C4": ..., "C5": ...}`,
the ends of the stages at strides 4, 8, 16 and 32 (a `small_input` stem divides them by 4);
`feature_channels` and `feature_strides` say their widths and strides without running it.
The zoo's classifiers are their backbone plus a head (`ResNet` subclasses `ResNetBackbone`:
`forward` = quant -> `forward_features` -> pool -> fc -> dequant), so a backbone has the
classifier's state-dict names less the head's (torchvision's detection `backbone.body.*`),
and no quant stubs: those sit at the edge of the task model, here `FeatureExtractor`.

>>> import tianyuan as ty
>>> from tianyuan.zoo import get_backbone
>>> body = get_backbone("resnet50", freeze_at=1)        # stem + layer1 frozen (detection)
>>> {k: v.shape for k, v in body.forward_features(ty.randn(1, 3, 64, 64)).items()}
{'C2': (1, 256, 16, 16), 'C3': (1, 512, 8, 8), 'C4': (1, 1024, 4, 4), 'C5': (1, 2048, 2, 2)}
"""
import difflib
import fnmatch
from collections import OrderedDict

from tianyuan import nn

FEATURES = ("C2", "C3", "C4", "C5")
_BUILDERS = OrderedDict()   # name -> backbone builder


class Backbone(nn.Module):
    """Base of the zoo's backbones. Subclasses build the stem and stages, set
    `feature_channels` / `feature_strides` ({"C2": ..., "C5": ...}) and define
    `forward_features(x)`, `fuse_groups()` and `stages()` ({"stem": [names], "C2": [names],
    ...}: the modules that compute each feature from the one before, for `freeze_stages`).
    `head_prefixes` name a classifier's state this backbone leaves out when it loads
    classifier weights."""

    head_prefixes = ("fc.",)

    def forward(self, x):
        return self.forward_features(x)

    def stages(self):
        raise NotImplementedError(f"{type(self).__name__}: stages() is not implemented")


def freeze_stages(model, n):
    """Freeze `model`'s stem and its first `n` stages (n = 0..4; C2 is the first) in place:
    their parameters stop training and their BatchNorm2d layers become FrozenBatchNorm2d.
    detectron2's FREEZE_AT is n + 1; torchvision's trainable_layers is 4 - n (ResNet).
    Returns the model."""
    stages = model.stages()
    if not 0 <= int(n) <= len(FEATURES):
        raise ValueError(f"freeze_stages: n must be 0 (the stem) to {len(FEATURES)}, got {n}")
    for key in ("stem",) + FEATURES[:int(n)]:
        for name in stages[key]:
            module = nn.convert_frozen_batchnorm(model.get_submodule(name))
            module.requires_grad_(False)
            _set_submodule(model, name, module)
    return model


def _set_submodule(model, name, module):
    parent, _, leaf = name.rpartition(".")
    model.get_submodule(parent)._modules[leaf] = module


def load_backbone_weights(model, arch, weights=None, pretrained=False):
    """Load a classifier's weights (manifest name or file; `pretrained`: the arch's default
    entry) into backbone `model`, leaving out the head (`model.head_prefixes`); any other
    key that does not fit is an error naming it."""
    from tianyuan.weights import load_weights

    from .classification.common import chosen_weights   # (classification imports this file)
    weights = chosen_weights(arch, weights, pretrained)
    if weights is None:
        return model
    state = load_weights(weights, arch=arch)
    model.load_state_dict({k: v for k, v in state.items()
                           if not k.startswith(model.head_prefixes)}, strict=True)
    return model


def register_backbone(name, builder):
    """Register a backbone builder under `name` (a zoo model's name); loud on duplicates."""
    if name in _BUILDERS:
        raise ValueError(f"register_backbone: a backbone named {name!r} is already registered")
    _BUILDERS[name] = builder
    return builder


def list_backbones(pattern=None):
    """Sorted registered backbone names, optionally filtered by a glob (`"resnet*"`)."""
    names = sorted(_BUILDERS)
    return [n for n in names if fnmatch.fnmatch(n, pattern)] if pattern else names


def get_backbone(name, *, freeze_at=None, frozen_bn=False, **kwargs):
    """Build backbone `name` with the model builder's keyword arguments (weights,
    pretrained, small_input, width_mult ...), then optionally freeze: `freeze_at=n` the stem
    and first n stages (`freeze_stages`), `frozen_bn` every BatchNorm2d (torchvision's
    detection backbones over pretrained weights)."""
    if name not in _BUILDERS:
        close = difflib.get_close_matches(str(name), list(_BUILDERS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"get_backbone: unknown backbone {name!r}{hint} "
                       f"(known: {list_backbones()})")
    model = _BUILDERS[name](**kwargs)
    if frozen_bn:
        model = nn.convert_frozen_batchnorm(model)
    if freeze_at is not None:
        freeze_stages(model, freeze_at)
    return model


class FeatureExtractor(nn.Module):
    """A task model of features alone: quant -> body.forward_features -> one dequant per
    feature. QAT-ready as the classifiers are (`fuse_groups` are the body's), so a backbone's
    int8 features can be checked and deployed on their own.

    >>> int8 = quantization.quantize(quantization.quantize_qat(FeatureExtractor(body)))
    """

    def __init__(self, body, features=FEATURES):
        super().__init__()
        self.features = tuple(features)
        self.quant = nn.QuantStub()
        self.body = body
        self.dequant = nn.ModuleDict({k: nn.DequantStub() for k in self.features})

    def forward(self, x):
        out = self.body.forward_features(self.quant(x))
        return {k: self.dequant[k](out[k]) for k in self.features}

    def fuse_groups(self):
        return [[f"body.{name}" for name in group] for group in self.body.fuse_groups()]
