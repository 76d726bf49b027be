"""What the zoo's detectors share: the model card and loading weights.

torchvision's v1 COCO files were trained with FrozenBatchNorm2d at eps 0 (its builders
overwrite_eps(model, 0.0) after loading them; REFERENCE.md 1e), so a torchvision-format file
sets every frozen BN's eps to 0; our own (safetensors) files keep the model's eps.
"""
import logging

import numpy as np

from tianyuan import nn
from tianyuan.weights.preprocessing import TORCHVISION_DETECTION

logger = logging.getLogger("tianyuan.zoo")


def detection_card(**extra):
    """A detection model card: COCO's 91-way label space (torchvision's: category ids 1-90,
    0 the background, gaps unused), the in-model preprocessing. Published numbers come from
    the weights manifest at lookup (`box_map` per source)."""
    card = {"task": "detection", "dataset": "COCO", "num_classes": 91,
            "input_size": (3, TORCHVISION_DETECTION["min_size"], TORCHVISION_DETECTION["max_size"]),
            "preprocessing": dict(TORCHVISION_DETECTION)}
    card.update(extra)
    return card


def _torchvision_format(weights):
    from tianyuan.weights import get_entry
    text = str(weights)
    try:
        return get_entry(text).format == "torchvision"
    except KeyError:
        return text.lower().endswith((".pth", ".pt"))


def load_detection_weights(model, arch, weights, head_keys=()):
    """Load `weights` (a manifest name or a file) into `model` by name. A class head of
    another size than the file's (`head_keys`: its weight first) is left as initialised and
    said so (fine-tuning COCO weights on other classes); any other misfit is an error naming
    every key."""
    from tianyuan.weights import load_weights
    state = load_weights(weights, arch=arch)
    head = [k for k in head_keys if k in state]
    ours = model.state_dict()
    if head and np.shape(state[head[0]]) != np.shape(ours[head[0]]):
        logger.warning("%s: loaded %s without its %d-way class head; %r is a new %d-way one",
                       arch, weights, np.shape(state[head[0]])[0], head[0],
                       np.shape(ours[head[0]])[0])
        state = {k: v for k, v in state.items() if k not in head}
        missing = set(ours) - set(state) - set(head)
        if missing or set(state) - set(ours):
            model.load_state_dict(state, strict=True)   # raises, naming every key
        model.load_state_dict(state, strict=False)
    else:
        model.load_state_dict(state, strict=True)
    if _torchvision_format(weights):
        for module in model.modules():
            if isinstance(module, nn.FrozenBatchNorm2d):
                module.eps = 0.0
    return model
