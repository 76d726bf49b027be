"""Top-down keypoint samples on a generated COCO-format folder: crops, heatmap targets at the
joints, flips that swap pairs, detections files, and bad input counted."""
import json

import numpy as np
import pytest

from tianyuan.datasets import CocoFormat, TopDownKeypoints, default_collate
from tianyuan.datasets.keypoint_geometry import render_heatmaps
from tianyuan.datasets.synthetic_people import write_coco_people
from tianyuan.datasets.transforms.random import sample_rng

SMALL = {"input_size": (64, 48), "heatmap_size": (16, 12)}


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    root = tmp_path_factory.mktemp("people")
    ann_file = write_coco_people(str(root), 4, size=96, seed=0)
    return root, ann_file


def _base(people):
    root, ann_file = people
    return CocoFormat(root / "images", ann_file, task="keypoints")


def _crop_xy(joints, center, scale, size=(48, 64)):
    """Image pixel indices -> input-crop pixels (rotation 0), independent of the dataset."""
    return (joints[:, :2] - center + scale / 2) * np.array(size) / scale


def test_one_sample_per_person_and_collate(people):
    base = _base(people)
    ds = TopDownKeypoints(base, **SMALL)
    assert len(ds) == len(base.api.anns) and ds.num_joints == 17 and ds.coco is base.api
    assert (1, 2) in ds.flip_pairs and len(ds.flip_pairs) == 8
    batch = default_collate([ds[0], ds[1]])
    assert batch["image"].shape == (2, 3, 64, 48) and batch["image"].dtype == np.float32
    assert batch["target"].shape == (2, 17, 16, 12) and batch["target_weight"].shape == (2, 17)
    assert batch["center"].shape == batch["scale"].shape == (2, 2)
    assert batch["image_id"].dtype == np.int64 and batch["score"].tolist() == [1.0, 1.0]
    np.testing.assert_allclose(batch["scale"][:, 0] / batch["scale"][:, 1], 0.75, rtol=1e-5)
    np.testing.assert_allclose(batch["area"], batch["scale"].prod(1), rtol=1e-5)
    assert abs(float(batch["image"].mean())) < 3            # normalised, not 0..255


def test_targets_peak_at_the_joints(people):
    ds = TopDownKeypoints(_base(people), **SMALL)
    for index in range(len(ds)):
        sample = ds[index]
        ann = ds.coco.imgToAnns[sample["image_id"]]
        crops = [_crop_xy(np.reshape(a["keypoints"], (17, 3)), sample["center"], sample["scale"])
                 for a in ann]
        xy = min(crops, key=lambda c: np.abs(c - [24, 32]).sum())    # the centred person
        peaks = sample["target"].reshape(17, -1).argmax(1)
        expected = (xy / 4 + 0.5).astype(int)
        assert np.array_equal(np.stack([peaks % 12, peaks // 12], 1), expected)
        assert np.allclose(sample["target"].max((1, 2)), 1.0)
        assert sample["target_weight"].tolist() == [1.0] * 17


def test_flip_mirrors_the_crop_and_swaps_the_pairs(people):
    base = _base(people)
    plain = TopDownKeypoints(base, **SMALL)
    flipped = TopDownKeypoints(base, train=True, flip=1.0, scale_factor=0.0, rotation=0,
                               half_body=None, **SMALL)
    a, b = plain[0], flipped[0]
    # the mirrored crop is the plain one mirrored about w / 2: one pixel apart (flip test's
    # one-pixel shift comes from here)
    np.testing.assert_allclose(b["image"][:, :, 1:], a["image"][:, :, ::-1][:, :, :-1],
                               atol=0.05)
    order = np.arange(17)
    for left, right in flipped.flip_pairs:
        order[left], order[right] = right, left
    peak = lambda t: np.stack(np.unravel_index(t.reshape(17, -1).argmax(1), (16, 12)), 1)
    mirrored = peak(a["target"][order])
    mirrored[:, 1] = 11 - mirrored[:, 1]
    assert np.abs(peak(b["target"]) - mirrored).max() <= 1


def test_augmentation_is_a_function_of_the_sample_seed(people):
    ds = TopDownKeypoints(_base(people), train=True, **SMALL)
    draws = []
    for _ in range(2):
        with sample_rng(np.random.SeedSequence([3, 1])):
            draws.append(ds[1])
    assert np.array_equal(draws[0]["image"], draws[1]["image"])
    assert np.array_equal(draws[0]["target"], draws[1]["target"])
    with sample_rng(np.random.SeedSequence([4, 1])):
        assert not np.array_equal(ds[1]["image"], draws[0]["image"])


def test_reference_gaussian_and_weights():
    joints = np.array([[20.0, 30.0], [-10.0, 30.0], [-40.0, 30.0], [5.0, 5.0]])
    target, weight = render_heatmaps(joints, [1, 1, 1, 0], (48, 64), (12, 16), sigma=2)
    assert weight.tolist() == [1, 1, 0, 0]        # 2.5 px off the map: its tail still counts
    assert target[0, 8, 5] == 1.0 and target[0, 8, 6] == pytest.approx(np.exp(-1 / 8))
    assert target[1].max() == pytest.approx(np.exp(-4 / 8)) and not target[2:].any()


def test_sigma_per_stage(people):
    ds = TopDownKeypoints(_base(people), sigma=(3.0, 2.0, 1.0), **SMALL)
    target = ds[0]["target"]
    assert target.shape == (3, 17, 16, 12)
    assert (target[0] > 0.5).sum() > (target[2] > 0.5).sum()


def _write(tmp_path, anns, width=96):
    names = [f"j{k}" for k in range(16)] + ["nose"]
    data = {"images": [{"id": 1, "file_name": "a.png", "width": width, "height": 96}],
            "categories": [{"id": 1, "name": "person", "keypoints": names}],
            "annotations": [{"id": n + 1, "image_id": 1, "category_id": 1, "iscrowd": 0, **a}
                            for n, a in enumerate(anns)]}
    import cv2
    (tmp_path / "images").mkdir(exist_ok=True)
    cv2.imwrite(str(tmp_path / "images" / "a.png"), np.zeros((96, width, 3), np.uint8))
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(data))
    return CocoFormat(tmp_path / "images", path, task="keypoints", min_keypoints=0)


def _kps(count):
    return sum(([10 + k, 20 + k, 2] if k < count else [0, 0, 0] for k in range(17)), [])


def test_bad_persons_are_counted_and_left_out(tmp_path):
    base = _write(tmp_path, [
        {"bbox": [5, 5, 40, 60], "keypoints": _kps(5), "num_keypoints": 5},
        {"bbox": [5, 5, 40, 60], "keypoints": _kps(0), "num_keypoints": 0},     # no joints
        {"bbox": [200, 5, 40, 60], "keypoints": _kps(3), "num_keypoints": 3},   # outside
        {"bbox": [5, 5, 40, 60], "keypoints": _kps(4), "num_keypoints": 9}])    # says 9
    with pytest.warns(RuntimeWarning, match=r"1 person\(s\) with no labelled joint.*"
                      r"annotation 2.*1 box\(es\) with nothing inside.*annotation 3.*"
                      r"num_keypoints 9, the array labels 4"):
        ds = TopDownKeypoints(base, train=True, **SMALL)
    assert len(ds) == 2 and ds.skipped == {"no_labelled_joints": 1, "box_outside_image": 1,
                                           "num_keypoints_mismatch": 1}
    assert ds[1]["target_weight"].sum() == 4


def test_person_boxes_file(tmp_path):
    base = _write(tmp_path, [{"bbox": [5, 5, 40, 60], "keypoints": _kps(5)}])
    dets = [{"image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 50], "score": 0.9},
            {"image_id": 1, "category_id": 1, "bbox": [50, 10, 30, 50], "score": 0.05},
            {"image_id": 1, "category_id": 2, "bbox": [50, 10, 30, 50], "score": 0.9},
            {"image_id": 7, "category_id": 1, "bbox": [50, 10, 30, 50], "score": 0.9},
            {"image_id": 1, "category_id": 1, "bbox": [500, 10, 30, 50], "score": 0.9}]
    path = tmp_path / "dets.json"
    path.write_text(json.dumps(dets))
    with pytest.warns(RuntimeWarning, match="detection.*of images the annotation file does"):
        ds = TopDownKeypoints(base, person_boxes=str(path), box_threshold=0.1, **SMALL)
    assert [s["score"] for s in ds.samples] == [0.9]
    assert ds.skipped == {"detection_of_unknown_image": 1, "box_outside_image": 1}
    assert ds[0]["center"].tolist() == [25.0, 35.0] and ds[0]["score"] == 0.9
    path.write_text(json.dumps([{"image_id": 1, "bbox": [1, 2, 3], "score": 1.0}]))
    with pytest.raises(ValueError, match=r"dets.json: detection \[0\] needs.*bbox of 4"):
        TopDownKeypoints(base, person_boxes=str(path))
    with pytest.raises(ValueError, match="person_boxes .* is for evaluation"):
        TopDownKeypoints(base, person_boxes=str(path), train=True)


def _reference_affine(center, scale, rot, out_w, out_h, inv=False):
    """Xiao et al.'s get_affine_transform (scale in pixels), written out as the spec."""
    import cv2
    src_w, t = scale[0], np.pi * rot / 180
    src_dir = np.array([-(-0.5 * src_w) * np.sin(t), (-0.5 * src_w) * np.cos(t)])
    dst_dir = np.array([0, out_w * -0.5])
    third = lambda a, b: b + np.array([-(a - b)[1], (a - b)[0]])
    src = np.array([center, center + src_dir, third(center, center + src_dir)], np.float32)
    dst_c = np.array([out_w * 0.5, out_h * 0.5])
    dst = np.array([dst_c, dst_c + dst_dir, third(dst_c, dst_c + dst_dir)], np.float32)
    return cv2.getAffineTransform(dst, src) if inv else cv2.getAffineTransform(src, dst)


def test_crop_and_back_projection_match_the_reference_transform():
    from tianyuan.datasets.keypoint_geometry import (affine_points, crop_affine,
                                                     heatmap_to_image)
    rng = np.random.default_rng(0)
    for _ in range(20):
        center, rot = rng.uniform(50, 500, 2), rng.uniform(-90, 90)
        scale = np.array([1.0, 4 / 3]) * rng.uniform(50, 400)
        ours = crop_affine(center, scale, rot, 192, 256)
        np.testing.assert_allclose(ours, _reference_affine(center, scale, rot, 192, 256),
                                   rtol=1e-4, atol=1e-3)
        coords = rng.uniform(0, 48, (1, 17, 2))
        back = _reference_affine(center, scale, 0, 48, 64, inv=True)
        np.testing.assert_allclose(heatmap_to_image(coords, center[None], scale[None], (48, 64)),
                                   affine_points(back, coords), rtol=1e-5, atol=1e-3)
