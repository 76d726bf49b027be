"""Detection zoo parts against transcriptions of torchvision's rules: anchors, box coder,
matcher, the transform (resize, pad, boxes mapped back) and the FPN. Tiny shapes."""
import math

import numpy as np
import pytest

import tianyuan as ty
from tianyuan.zoo.detection import (AnchorGenerator, BoxCoder, FeaturePyramidNetwork,
                                    GeneralizedRCNNTransform, LastLevelP6P7, Matcher,
                                    cell_anchors, retinanet_anchor_generator)
from tianyuan.zoo.detection.transform import resized_size


# ---------------------------------------------------------------- anchors

def cell_anchors_ref(sizes, ratios):
    """torchvision's generate_anchors, one anchor at a time in float32 (ratio-major)."""
    out = []
    for r in ratios:
        h_ratio = np.sqrt(np.float32(r))
        w_ratio = np.float32(1) / h_ratio
        for s in sizes:
            w, h = w_ratio * np.float32(s), h_ratio * np.float32(s)
            out.append([np.round(v / np.float32(2)) for v in (-w, -h, w, h)])
    return np.array(out, np.float32)


def test_cell_anchors_are_torchvisions():
    gen = retinanet_anchor_generator()
    assert gen.sizes == ((32, 40, 50), (64, 80, 101), (128, 161, 203), (256, 322, 406),
                         (512, 645, 812))
    assert gen.num_anchors_per_location() == [9] * 5
    for sizes, ratios, got in zip(gen.sizes, gen.aspect_ratios, gen.cell_anchors):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, cell_anchors_ref(sizes, ratios))
    assert cell_anchors((32,), (0.5, 1.0, 2.0)).tolist() == [[-23, -11, 23, 11],
                                                             [-16, -16, 16, 16],
                                                             [-11, -23, 11, 23]]


def test_grid_anchors_order_and_strides():
    gen = AnchorGenerator(((8, 16), (32,)), ((1.0,), (0.5, 2.0)))
    levels = gen.per_level((64, 96), [(4, 6), (2, 3)])
    assert [a.shape for a in levels] == [(4 * 6 * 2, 4), (2 * 3 * 2, 4)]
    base0, base1 = gen.cell_anchors
    for (h, w), stride, base, got in (((4, 6), 16, base0, levels[0]),
                                      ((2, 3), 32, base1, levels[1])):
        want = [base[a] + np.array([x, y, x, y]) * stride
                for y in range(h) for x in range(w) for a in range(len(base))]
        np.testing.assert_array_equal(got, np.array(want, np.float32))
    np.testing.assert_array_equal(gen((64, 96), [(4, 6), (2, 3)]), np.concatenate(levels))
    with pytest.raises(ValueError, match="2 feature levels"):
        AnchorGenerator(((8,),), ((1.0,),)).per_level((64, 64), [(4, 4), (2, 2)])


# ---------------------------------------------------------------- box coder, matcher

def test_box_coder_round_trip_and_clamp():
    rng = np.random.default_rng(0)
    anchors = np.concatenate([rng.uniform(0, 50, (20, 2)), rng.uniform(60, 120, (20, 2))],
                             1).astype(np.float32)
    boxes = anchors + rng.uniform(-8, 8, (20, 4)).astype(np.float32)
    for weights_ in ((1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)):
        coder = BoxCoder(weights_)
        codes = coder.encode(boxes, anchors)
        assert codes.dtype == np.float32
        np.testing.assert_allclose(coder.decode(codes, anchors), boxes, rtol=0, atol=1e-3)
    coder = BoxCoder((1.0, 1.0, 1.0, 1.0))
    a = np.array([[0, 0, 10, 20]], np.float32)
    np.testing.assert_allclose(coder.encode(np.array([[5, 0, 25, 40]], np.float32), a),
                               [[1.0, 0.5, math.log(2), math.log(2)]], rtol=1e-6)
    huge = coder.decode(np.array([[0, 0, 50, 50]], np.float32), a)   # exp clamped at 1000/16
    np.testing.assert_allclose(huge, [[5 - 312.5, 10 - 625, 5 + 312.5, 10 + 625]], rtol=1e-5)


def test_matcher_thresholds_and_low_quality_matches():
    iou = np.array([[0.9, 0.45, 0.1, 0.0, 0.3],
                    [0.2, 0.3, 0.35, 0.0, 0.35]], np.float32)
    assert Matcher(0.5, 0.4)(iou).tolist() == [0, -2, -1, -1, -1]
    # box 1's best IoU (0.35) is at anchors 2 and 4 (a tie): both keep their best match
    assert Matcher(0.5, 0.4, allow_low_quality_matches=True)(iou).tolist() == [0, -2, 1, -1, 1]
    with pytest.raises(ValueError, match="no ground-truth boxes"):
        Matcher(0.5, 0.4)(np.zeros((0, 5), np.float32))
    with pytest.raises(ValueError, match="above"):
        Matcher(0.4, 0.5)


# ---------------------------------------------------------------- transform, FPN

def test_transform_resizes_pads_and_maps_boxes_back():
    assert resized_size(480, 640, 800, 1333) == (800, 1066)
    assert resized_size(500, 2000, 800, 1333) == (333, 1333)    # capped by max_size
    t = GeneralizedRCNNTransform(min_size=32, max_size=64).eval()
    ims = [np.full((3, 20, 30), 0.5, np.float32), np.zeros((3, 40, 20), np.float32)]
    targets = [{"boxes": np.array([[2, 4, 10, 16]], np.float32), "labels": np.array([1])},
               {"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64)}]
    batch, sizes, out = t(ims, targets)
    assert sizes == [(32, 48), (64, 32)] and batch.shape == (2, 3, 64, 64)
    mean, std = np.float32(0.485), np.float32(0.229)
    np.testing.assert_allclose(batch[0, 0, :32, :48], (np.float32(0.5) - mean) / std, rtol=1e-6)
    assert not batch[0, :, 32:].any() and not batch[0, :, :, 48:].any()     # zero padding
    scale = np.float32(32) / np.float32(20)
    np.testing.assert_allclose(out[0]["boxes"], [[2 * scale, 4 * scale, 10 * scale, 16 * scale]])
    assert targets[0]["boxes"][0, 0] == 2        # the caller's targets are not changed
    back = t.postprocess([{"boxes": out[0]["boxes"]}], sizes[:1], [(20, 30)])
    np.testing.assert_allclose(back[0]["boxes"], targets[0]["boxes"], rtol=1e-6)


def test_fpn_shapes_and_torchvision_names():
    fpn = FeaturePyramidNetwork([8, 16, 32], 12, LastLevelP6P7(12, 12))
    out = fpn([ty.randn(2, 8, 16, 12), ty.randn(2, 16, 8, 6), ty.randn(2, 32, 4, 3)])
    assert [tuple(p.shape) for p in out] == [(2, 12, 16, 12), (2, 12, 8, 6), (2, 12, 4, 3),
                                             (2, 12, 2, 2), (2, 12, 1, 1)]
    assert list(fpn.state_dict()) == (
        [f"inner_blocks.{i}.0.{p}" for i in range(3) for p in ("weight", "bias")]
        + [f"layer_blocks.{i}.0.{p}" for i in range(3) for p in ("weight", "bias")]
        + [f"extra_blocks.{c}.{p}" for c in ("p6", "p7") for p in ("weight", "bias")])
    from_c5 = LastLevelP6P7(32, 12)                  # v2: P6 from C5
    assert not from_c5.use_P5 and fpn.extra_blocks.use_P5
