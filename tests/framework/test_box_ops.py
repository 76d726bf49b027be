"""Box ops (framework/ops/boxes.py and their F wrappers) against per-box transcriptions of
torchvision's code: box_iou, the CPU NMS kernel's greedy loop, batched_nms, clipping."""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan.ops import boxes as B


def random_boxes(n, seed=0, spread=100.0, size=(1.0, 40.0), dtype=np.float32):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, spread, (n, 2))
    wh = rng.uniform(*size, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(dtype)


def iou_ref(a, b):
    """One pair, as torchvision's NMS kernel computes it (in a's dtype)."""
    zero = a.dtype.type(0)
    w = max(zero, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(zero, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    area_a, area_b = (a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1])
    with np.errstate(invalid="ignore"):    # two empty boxes: NaN, never above a threshold
        return inter / (area_a + area_b - inter)


def nms_ref(boxes, scores, threshold):
    """torchvision's nms_kernel_impl, one box at a time."""
    order = np.argsort(-scores, kind="stable")
    suppressed = np.zeros(len(boxes), bool)
    keep = []
    for pos, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        for j in order[pos + 1:]:
            if not suppressed[j] and iou_ref(boxes[i], boxes[j]) > threshold:
                suppressed[j] = True
    return np.array(keep, np.int64)


def test_box_iou_is_the_per_pair_formula():
    a, b = random_boxes(7, 1), random_boxes(5, 2)
    got = B.box_iou(a, b)
    assert got.shape == (7, 5) and got.dtype == np.float32
    want = np.array([[iou_ref(x, y) for y in b] for x in a], np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert np.all(np.diag(B.box_iou(a, a)) == 1)
    np.testing.assert_array_equal(F.box_iou(ty.tensor(a), b).numpy(), got)


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.7, 0.95])
@pytest.mark.parametrize("path", ["sparse", "blocks"])
def test_nms_is_torchvisions_greedy_loop(threshold, path, monkeypatch):
    if path == "blocks":   # force the blocked scan, with blocks smaller than the input
        monkeypatch.setattr(B, "sweep_max_pairs", lambda n: -1)
        monkeypatch.setattr(B, "NMS_BLOCK", 16)
    for seed in range(3):
        boxes = random_boxes(150, seed, spread=80)
        scores = np.random.default_rng(seed).integers(0, 20, 150).astype(np.float32)  # ties
        np.testing.assert_array_equal(B.nms(boxes, scores, threshold),
                                      nms_ref(boxes, scores, threshold))


def test_nms_edge_cases():
    empty = np.zeros((0, 4), np.float32)
    assert B.nms(empty, np.zeros(0, np.float32), 0.5).tolist() == []
    one = np.array([[0, 0, 1, 1]], np.float32)
    assert B.nms(one, np.ones(1, np.float32), 0.5).tolist() == [0]
    # zero-area and duplicate boxes; a negative threshold drops everything below the best
    boxes = np.array([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 5, 5], [0, 0, 5, 5], [9, 9, 12, 10]],
                     np.float32)
    scores = np.array([0.1, 0.2, 0.9, 0.8, 0.5], np.float32)
    for threshold in (-1.0, 0.0, 0.5, 1.0):
        np.testing.assert_array_equal(B.nms(boxes, scores, threshold),
                                      nms_ref(boxes, scores, threshold))
    assert B.nms(boxes, scores, 0.5).dtype == np.int64


def test_nms_float64_and_the_functional_wrapper():
    boxes, scores = random_boxes(60, 4, dtype=np.float64), np.linspace(1, 0, 60)
    np.testing.assert_array_equal(B.nms(boxes, scores, 0.4), nms_ref(boxes, scores, 0.4))
    kept = F.nms(ty.tensor(boxes), ty.tensor(scores), 0.4)
    assert isinstance(kept, ty.Tensor) and kept.dtype == np.int64
    with pytest.raises(ValueError, match=r"nms: boxes must be \(N, 4\)"):
        F.nms(np.zeros((3, 5), np.float32), np.zeros(3, np.float32), 0.5)
    with pytest.raises(ValueError, match="one value per box"):
        F.nms(boxes, scores[:-1], 0.5)


def _batched_ref(boxes, scores, idxs, threshold):
    keep = np.zeros(len(boxes), bool)
    for c in np.unique(idxs):
        members = np.flatnonzero(idxs == c)
        keep[members[nms_ref(boxes[members], scores[members], threshold)]] = True
    kept = np.flatnonzero(keep)
    return kept[np.argsort(-scores[kept], kind="stable")]


@pytest.mark.parametrize("n", [200, 1200])    # either side of torchvision's 4000 coordinates
def test_batched_nms_keeps_categories_apart(n):
    boxes = random_boxes(n, 5, spread=150)
    rng = np.random.default_rng(5)
    scores, idxs = rng.random(n).astype(np.float32), rng.integers(0, 4, n)
    got = B.batched_nms(boxes, scores, idxs, 0.5)
    np.testing.assert_array_equal(got, _batched_ref(boxes, scores, idxs, 0.5))
    same = B.batched_nms(boxes, scores, np.zeros(n, np.int64), 0.5)
    np.testing.assert_array_equal(same, B.nms(boxes, scores, 0.5))
    assert F.batched_nms(boxes, scores, idxs, 0.5).numpy().tolist() == got.tolist()
    with pytest.raises(TypeError, match="integer categories"):
        F.batched_nms(boxes, scores, idxs.astype(np.float32), 0.5)


def test_clip_and_remove_small_boxes():
    boxes = np.array([[-5, -2, 30, 12], [3, 4, 5, 4.5], [10, 1, 50, 60]], np.float32)
    clipped = F.clip_boxes(boxes, (20, 40)).numpy()
    assert clipped.dtype == np.float32
    assert clipped.tolist() == [[0, 0, 30, 12], [3, 4, 5, 4.5], [10, 1, 40, 20]]
    assert F.remove_small_boxes(boxes, 1.0).numpy().tolist() == [0, 2]
    assert F.box_area(boxes).numpy().tolist() == [35 * 14, 1.0, 40 * 59]
