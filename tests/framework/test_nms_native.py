"""The native NMS (framework/csrc/nms/, ops/nms.py) keeps exactly the indices its numpy twin
(ops/boxes.py, itself checked against torchvision's loop in test_box_ops.py) keeps: random
boxes, tied scores, 10k boxes, float64, degenerate boxes, per-category NMS by both paths."""
import numpy as np
import pytest

import tianyuan.functional as F
from tianyuan.ops import boxes as B
from tianyuan.ops import nms as native


def random_boxes(n, seed, spread=100.0, size=(1.0, 40.0), dtype=np.float32):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, spread, (n, 2))
    wh = rng.uniform(*size, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(dtype)


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.7, 1.0, -0.1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equal_to_the_numpy_twin(threshold, dtype):
    for seed in range(4):
        boxes = random_boxes(300, seed, dtype=dtype)
        scores = np.random.default_rng(seed).random(300).astype(dtype)
        scores = np.round(scores * 20) / 20            # many ties: input order decides
        got = native.nms(boxes, scores, threshold)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, B.nms(boxes, scores, threshold))


@pytest.mark.parametrize("spread, size", [(1000.0, (1.0, 100.0)), (3000.0, (1.0, 30.0)),
                                          (200.0, (50.0, 200.0))])
def test_ten_thousand_boxes(spread, size):
    # the sparse sweep (small boxes far apart) and the dense scan (large overlapping ones)
    boxes = random_boxes(10_000, 7, spread, size)
    scores = np.random.default_rng(8).random(10_000).astype(np.float32)
    for threshold in (0.5, 0.7):
        np.testing.assert_array_equal(native.nms(boxes, scores, threshold),
                                      B.nms(boxes, scores, threshold))


def test_degenerate_boxes_and_nan_scores():
    boxes = random_boxes(80, 3)
    boxes[:10, 2] = boxes[:10, 0]              # zero width
    boxes[10:20, 2] = boxes[10:20, 0] - 5      # negative width
    boxes[20:25] = boxes[25:30]                # duplicates
    boxes[30] = np.nan
    scores = np.random.default_rng(4).random(80).astype(np.float32)
    scores[40:43] = np.nan
    np.testing.assert_array_equal(native.nms(boxes, scores, 0.5), B.nms(boxes, scores, 0.5))
    assert native.nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), 0.5).shape == (0,)


@pytest.mark.parametrize("n", [50, 2000])      # offsets (<= 4000 coordinates), per category
def test_batched_equal_to_the_numpy_twin(n):
    boxes = random_boxes(n, 5)
    scores = np.round(np.random.default_rng(6).random(n) * 50).astype(np.float32) / 50
    idxs = np.random.default_rng(7).integers(0, 6, n)
    got = F.batched_nms(boxes, scores, idxs, 0.5).numpy()
    np.testing.assert_array_equal(got, B.batched_nms(boxes, scores, idxs, 0.5))
    np.testing.assert_array_equal(native.batched_nms(boxes, scores, idxs, 0.5), got)


def test_functional_nms_is_native_and_checks_shapes():
    boxes, scores = random_boxes(40, 1), np.random.default_rng(2).random(40).astype(np.float32)
    np.testing.assert_array_equal(F.nms(boxes, scores, 0.5).numpy(), B.nms(boxes, scores, 0.5))
    from tianyuan import _C
    with pytest.raises(ValueError, match="scores must be"):
        _C.nms(boxes, scores[:5], 0.5)
    with pytest.raises(ValueError, match="boxes must be"):
        _C.nms(boxes[:, :3], scores, 0.5)
    with pytest.raises(ValueError, match="idxs must be"):
        _C.batched_nms(boxes, scores, np.zeros(3, np.int64), 0.5)
