"""Per-model test sizes, derived from the registry (STYLE.md item 14).

Every registered classifier is tested; the big ones run at 1x3x32x32 (forward only for the
biggest) so the zoo suite stays fast on two cores.
"""
import numpy as np

import tianyuan as ty
from tianyuan import zoo

MODELS = zoo.list_models(task="classification")   # Inception (75 x 75 and up): its own file
BIG = {"resnet101", "resnet152", "shufflenet_v2_x2_0", "shufflenet_v1_x2_0_g8"}
FORWARD_ONLY = {"resnet101", "resnet152"}   # the biggest: shapes and state, no training step
TORCHVISION_ARCHS = [n for n in MODELS if n.startswith(("resnet", "mobilenet_v2",
                                                        "shufflenet_v2"))]
# torchvision's num_params (weights meta) for the default 1000-class builds
TORCHVISION_PARAMS = {"resnet18": 11689512, "resnet34": 21797672, "resnet50": 25557032,
                      "resnet101": 44549160, "resnet152": 60192808, "mobilenet_v2": 3504872,
                      "shufflenet_v2_x0_5": 1366792, "shufflenet_v2_x1_0": 2278604,
                      "shufflenet_v2_x1_5": 3503624, "shufflenet_v2_x2_0": 7393996}
_CACHE = {}


def input_shape(name, batch=2):
    """(batch, 3, 32, 32) for the big models, (batch, 3, 64, 64) otherwise (BN in training
    needs more than 2 images of 1x1 maps at the end, so training uses batch 4)."""
    return (batch, 3, 32, 32) if name in BIG else (batch, 3, 64, 64)


def batch(shape, num_classes=10, seed=0):
    rng = np.random.default_rng(seed)
    x = ty.Tensor(rng.standard_normal(shape).astype(np.float32))
    y = ty.Tensor(rng.integers(0, num_classes, shape[0]).astype(np.int64))
    return x, y


def cached(name):
    """A default build shared by the read-only tests (seeded, so runs are repeatable)."""
    if name not in _CACHE:
        ty.manual_seed(0)
        _CACHE[name] = zoo.get_model(name).eval()
    return _CACHE[name]
