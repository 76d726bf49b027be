"""Optional (skipped without torch and torchvision): in train mode, on one batch of two small
images with the same targets, our RetinaNet and Faster R-CNN (ResNet-18 and -50 FPN) given
torchvision's randomly initialised weights return its loss dict within 1e-4.

Both sides use FrozenBatchNorm2d, so train mode does not differ by batch statistics. Faster
R-CNN's two samplers draw at random; the test makes them deterministic without touching the
library, two ways: batch sizes large enough that every candidate is taken ("all"), or both
sides' permutations patched to the identity at the default batch sizes ("first": the first
positives and negatives in index order, so the positive fraction and counts are exercised).
"""
import numpy as np
import pytest

from tianyuan import nn, weights, zoo
from tianyuan.zoo.detection import rpn as our_rpn

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")
from torchvision.models.detection import FasterRCNN as TVFasterRCNN  # noqa: E402
from torchvision.models.detection import RetinaNet as TVRetinaNet  # noqa: E402
from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor  # noqa: E402
from torchvision.ops.feature_pyramid_network import LastLevelP6P7  # noqa: E402

SIZE = dict(min_size=96, max_size=128)
TARGETS = [{"boxes": np.array([[5, 8, 60, 70], [40, 12, 110, 50], [70, 50, 120, 95]],
                              np.float32), "labels": np.array([1, 3, 2])},
           {"boxes": np.array([[2, 3, 45, 60], [30, 40, 70, 85]], np.float32),
            "labels": np.array([2, 1])}]
TOL = 1e-4
# torchvision's RetinaNet names its losses otherwise; Faster R-CNN's are the same
TORCHVISION_NAMES = {"classification": "loss_cls", "bbox_regression": "loss_box_reg"}


def images(seed=0, sizes=((3, 100, 130), (3, 90, 70))):
    rng = np.random.default_rng(seed)
    return [rng.random(s).astype(np.float32) for s in sizes]


def torch_body(depth):
    torch.manual_seed(0)
    return getattr(tv.models, f"resnet{depth}")(norm_layer=tv.ops.misc.FrozenBatchNorm2d)


def load_into(ours, theirs, arch):
    """theirs' weights through the converter into ours (FrozenBatchNorm2d in the body)."""
    nn.convert_frozen_batchnorm(ours.backbone.body)
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    state = weights.convert_state_dict(state, arch, "torchvision")
    ours.load_state_dict(state, strict=True)
    return ours.train(), theirs.train()


def both_losses(ours, theirs):
    ims = images()
    want = theirs([torch.from_numpy(im) for im in ims],
                  [{k: torch.from_numpy(v) for k, v in t.items()} for t in TARGETS])
    want = {TORCHVISION_NAMES.get(k, k): v for k, v in want.items()}
    got = ours(ims, [dict(t) for t in TARGETS])
    assert set(got) == set(want)
    return {k: (got[k].item(), want[k].item()) for k in want}


def assert_close(losses):
    for name, (got, want) in losses.items():
        assert abs(got - want) <= TOL, f"{name}: ours {got} torchvision {want}"


@pytest.mark.parametrize("depth", [18, 50])
def test_retinanet_losses_equal_torchvisions(depth):
    backbone = _resnet_fpn_extractor(torch_body(depth), 5, [2, 3, 4],
                                     extra_blocks=LastLevelP6P7(256, 256))
    theirs = TVRetinaNet(backbone, num_classes=4, **SIZE)
    arch = f"retinanet_resnet{depth}_fpn"
    ours, theirs = load_into(getattr(zoo, arch)(num_classes=4, **SIZE), theirs, arch)
    losses = both_losses(ours, theirs)
    assert losses["loss_cls"][1] > 0 and losses["loss_box_reg"][1] > 0
    assert_close(losses)


class IdentityPermutation:
    permutation = staticmethod(np.arange)


def first_indices(monkeypatch):
    """Both samplers take the first candidates in index order (identity permutations):
    torchvision's through torch.randperm, ours (sample_fg_bg, both stages) through rng()."""
    def arange(n, device=None, **_):
        return torch.arange(n, device=device)
    monkeypatch.setattr(torch, "randperm", arange)
    monkeypatch.setattr(our_rpn, "rng", IdentityPermutation)


@pytest.mark.parametrize("sampler", ["all", "first"])
@pytest.mark.parametrize("depth", [18, 50])
def test_faster_rcnn_losses_equal_torchvisions(depth, sampler, monkeypatch):
    sizes = {}
    if sampler == "all":
        sizes = dict(rpn_batch_size_per_image=10 ** 6, box_batch_size_per_image=10 ** 6)
    else:
        first_indices(monkeypatch)
    theirs = TVFasterRCNN(_resnet_fpn_extractor(torch_body(depth), 5), num_classes=4,
                          **SIZE, **sizes)
    arch = f"fasterrcnn_resnet{depth}_fpn"
    ours, theirs = load_into(getattr(zoo, arch)(num_classes=4, **SIZE, **sizes), theirs, arch)
    losses = both_losses(ours, theirs)
    assert all(want > 0 for _, want in losses.values())
    assert_close(losses)
