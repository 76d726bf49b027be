"""Optional (skipped without torch and torchvision): roi_align and nms equal torchvision.ops
on random inputs, and Faster R-CNN R50-FPN given torchvision's randomly initialised weights
through the converter returns its detections on a photo (boxes within 1e-2 px, scores within
1e-4, same labels and order) in eval mode."""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import weights, zoo

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio", [-1, 2])
def test_roi_align_equals_torchvisions(aligned, ratio):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 20, 24)).astype(np.float32)
    xy = rng.uniform(-5, 40, (30, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0, 30, (30, 2))], 1)
    rois = np.concatenate([rng.integers(0, 2, (30, 1)), boxes], 1).astype(np.float32)
    g = rng.standard_normal((30, 5, 3, 4)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    want = tv.ops.roi_align(tx, torch.tensor(rois), (3, 4), 0.5, ratio, aligned)
    (want * torch.tensor(g)).sum().backward()
    ours = ty.tensor(x, requires_grad=True)
    got = F.roi_align(ours, rois, (3, 4), 0.5, ratio, aligned)
    (got * ty.tensor(g)).sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_nms_equals_torchvisions():
    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 500, (3000, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(1, 80, (3000, 2))], 1).astype(np.float32)
    scores = rng.random(3000).astype(np.float32)          # distinct: no tie order to differ
    idxs = rng.integers(0, 7, 3000)
    for t in (0.3, 0.5, 0.7):
        want = tv.ops.nms(torch.tensor(boxes), torch.tensor(scores), t).numpy()
        np.testing.assert_array_equal(F.nms(boxes, scores, t).numpy(), want)
        want = tv.ops.batched_nms(torch.tensor(boxes), torch.tensor(scores), torch.tensor(idxs),
                                  t).numpy()
        np.testing.assert_array_equal(F.batched_nms(boxes, scores, idxs, t).numpy(), want)


def photo():
    skimage = pytest.importorskip("skimage")
    image = skimage.data.astronaut()                    # (512, 512, 3) uint8, a real photo
    return np.ascontiguousarray(image.transpose(2, 0, 1)).astype(np.float32) / 255


def test_detections_equal_torchvisions_through_the_converter():
    torch.manual_seed(0)
    theirs = tv.models.detection.fasterrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=320, max_size=320,
        box_score_thresh=0.0).eval()
    # random heads score every class near 1 / 91: a larger class bias gives some spread
    torch.nn.init.normal_(theirs.roi_heads.box_predictor.cls_score.bias, std=2.0)
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    state = weights.convert_state_dict(state, "fasterrcnn_resnet50_fpn", "torchvision")
    ours = zoo.fasterrcnn_resnet50_fpn(min_size=320, max_size=320, box_score_thresh=0.0)
    state = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    missing = ours.load_state_dict(state, strict=False)
    assert not missing.unexpected_keys
    ours.eval()
    image = photo()
    with torch.no_grad():
        want = theirs([torch.from_numpy(image)])[0]
    got = ours([image])[0]
    assert len(got["labels"]) > 0
    assert got["labels"].tolist() == want["labels"].tolist()
    np.testing.assert_allclose(got["scores"], want["scores"].numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(got["boxes"], want["boxes"].numpy(), rtol=0, atol=1e-2)
