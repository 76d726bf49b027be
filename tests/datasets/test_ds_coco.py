import json

import numpy as np
import pytest
from pycocotools.coco import COCO as CocoApi

from ds_fakes import ann, coco_json, write_image, write_json
from tianyuan.datasets import (COCO, COCO_FLIP_PAIRS, COCO_PERSON_KEYPOINTS, CocoFormat,
                               Objects365, keypoints_to_coco)

CATEGORIES = [{"id": 7, "name": "kite"}, {"id": 1, "name": "person"}, {"id": 3, "name": "car"}]
SIZES = {1: (20, 30), 2: (16, 16), 3: (24, 12)}   # image id -> (height, width)


def _images(root, names=None):
    names = names or {i: f"{i:012d}.jpg" for i in SIZES}
    for image_id, (h, w) in SIZES.items():
        write_image(str(root / names[image_id]), h, w)
    return [{"id": i, "file_name": names[i], "height": h, "width": w}
            for i, (h, w) in SIZES.items()]


@pytest.fixture
def instances(tmp_path):
    images = _images(tmp_path / "val2017")
    annotations = [ann(1, 1, 3, [2, 3, 10, 5]), ann(2, 1, 7, [25, 1, 10, 4]),
                   ann(3, 1, 1, [0, 0, 30, 20], iscrowd=1), ann(4, 2, 1, [1, 1, 0, 5]),
                   ann(5, 3, 1, [1, 2, 3, 4])]
    path = tmp_path / "annotations" / "instances_val2017.json"
    write_json(str(path), coco_json(images, annotations, CATEGORIES))
    return tmp_path / "val2017", path


def test_detection_items_and_label_mapping(instances):
    root, ann_file = instances
    ds = COCO(root, ann_file)
    assert len(ds) == 3 and ds.category_ids == [1, 3, 7] and ds.classes == ["person", "car", "kite"]
    item = ds[0]
    assert item["image"].shape == (20, 30, 3) and item["info"]["image_id"] == 1
    # bbox [25, 1, 10, 4] runs past the 30-pixel width: clipped
    np.testing.assert_allclose(item["boxes"], [[2, 3, 12, 8], [25, 1, 30, 5]])
    assert item["labels"].dtype == np.int64 and item["labels"].tolist() == [1, 2]
    np.testing.assert_allclose(item["crowd_boxes"], [[0, 0, 30, 20]])
    assert len(ds[1]["boxes"]) == 0   # the zero-width box is dropped
    assert len(COCO(root, ann_file, remove_empty=True)) == 2
    with_crowd = COCO(root, ann_file, include_crowd=True)[0]
    assert len(with_crowd["boxes"]) == 3 and len(with_crowd["crowd_boxes"]) == 0


def test_category_ids_round_trip_through_results(instances):
    root, ann_file = instances
    ds = COCO(root, ann_file)
    assert ds.label_to_category_id([0, 1, 2]).tolist() == [1, 3, 7]
    item = ds[0]
    results = ds.to_coco_detections(1, item["boxes"], np.ones(2), item["labels"])
    assert [r["category_id"] for r in results] == [3, 7]
    assert results[0]["bbox"] == [2.0, 3.0, 10.0, 5.0]
    api = CocoApi(str(ann_file))
    loaded = api.loadRes(results)   # the format pycocotools evaluation reads
    assert sorted(a["category_id"] for a in loaded.anns.values()) == [3, 7]


def _person(values):
    """17 keypoints; `values` maps index -> (x, y, v)."""
    flat = [0] * 51
    for k, (x, y, v) in values.items():
        flat[3 * k:3 * k + 3] = [x, y, v]
    return flat


def test_keypoints_filters_and_per_instance(tmp_path):
    images = _images(tmp_path / "imgs")
    person = {"id": 1, "name": "person", "supercategory": "person",
              "keypoints": list(COCO_PERSON_KEYPOINTS), "skeleton": [[16, 14]]}
    annotations = [ann(1, 1, 1, [1, 1, 10, 15], keypoints=_person({0: (5, 4, 2), 5: (3, 8, 1)})),
                   ann(2, 1, 1, [12, 1, 10, 15], keypoints=_person({})),         # unlabelled
                   ann(3, 2, 1, [1, 1, 2, 2], keypoints=_person({1: (2, 2, 2)})),  # tiny
                   ann(4, 3, 1, [0, 0, 12, 24], iscrowd=1, keypoints=_person({}))]
    path = tmp_path / "person_keypoints.json"
    write_json(str(path), coco_json(images, annotations, [person]))
    ds = COCO(tmp_path / "imgs", path, task="keypoints", remove_empty=True)
    assert len(ds) == 2 and ds.flip_pairs == COCO_FLIP_PAIRS
    item = ds[0]
    assert item["keypoints"].shape == (1, 17, 3) and item["keypoints"].dtype == np.float32
    np.testing.assert_allclose(item["keypoints"][0, 0], [5.5, 4.5, 2])   # pixel centre
    np.testing.assert_allclose(item["keypoints"][0, 1], [0, 0, 0])
    np.testing.assert_allclose(keypoints_to_coco(item["keypoints"])[0, 5], [3, 8, 1])
    assert len(COCO(tmp_path / "imgs", path, task="keypoints", remove_empty=True,
                    min_area=10)) == 1
    per = COCO(tmp_path / "imgs", path, task="keypoints", min_keypoints=0, per_instance=True)
    assert len(per) == 3 and per[1]["boxes"].shape == (1, 4)


def test_objects365_v2_patch_layout_and_missing_images(tmp_path):
    names = {i: f"images/v2/patch{i % 2}/objects365_v2_{i:08d}.jpg" for i in SIZES}
    on_disk = {i: f"patch{i % 2}/objects365_v2_{i:08d}.jpg" for i in SIZES}
    images = _images(tmp_path / "train", on_disk)
    for image in images:
        image["file_name"] = names[image["id"]]
    images.append({"id": 9, "file_name": "images/v2/patch5/objects365_v2_00000009.jpg",
                   "height": 8, "width": 8})
    categories = [{"id": i + 1, "name": f"class{i}"} for i in range(365)]
    path = tmp_path / "zhiyuan_objv2_train.json"
    write_json(str(path), coco_json(images, [ann(1, 2, 365, [1, 1, 4, 4])], categories))
    with pytest.warns(RuntimeWarning, match="1 of 4 images .* missing"):
        ds = Objects365(tmp_path / "train", path, version=2)
    assert len(ds) == 3 and ds.num_missing == 1 and len(ds.classes) == 365
    item = ds[1]
    assert item["info"]["image_id"] == 2 and item["labels"].tolist() == [364]
    assert item["image"].shape == (16, 16, 3)


def test_coco_format_user_data_and_errors(tmp_path, instances):
    root, ann_file = instances
    ds = CocoFormat(root, ann_file)
    assert len(ds) == 3 and ds.aspect_ratios()[0] == 1.5
    with pytest.raises(FileNotFoundError, match="annotation json"):
        CocoFormat(root, tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match="nope does not exist"):
        COCO(tmp_path / "nope", ann_file)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"images": [{"id": 1}], "annotations": [{"image_id": 1}]}))
    with pytest.raises((ValueError, KeyError)):
        COCO(root, bad)
    with pytest.raises(ValueError, match="no category with 'keypoints'"):
        COCO(root, ann_file, task="keypoints")


def _with(tmp_path, images=None, annotations=(), categories=CATEGORIES):
    root = tmp_path / "val2017"
    images = _images(root) if images is None else images
    path = tmp_path / "edited.json"
    write_json(str(path), coco_json(images, list(annotations), categories))
    return root, path


@pytest.mark.parametrize("edit, says", [
    ({"bbox": [1, 2, float("nan"), 3]}, r"annotation 9: 'bbox' must be 4 finite numbers"),
    ({"bbox": [1, 2, float("inf"), 3]}, "4 finite numbers"),
    ({"bbox": [1, 2, 3]}, "4 finite numbers"),
    ({"iscrowd": 2}, r"annotation 9: 'iscrowd' must be 0 or 1, got 2"),
    ({"iscrowd": "yes"}, "'iscrowd' must be 0 or 1, got 'yes'"),
    ({"iscrowd": -1}, "'iscrowd' must be 0 or 1"),
    ({"category_id": 99}, "annotation 9: category_id 99 is not among the file's categories"),
    ({"image_id": "1"}, "'image_id' must be an integer"),
    ({"area": float("nan")}, "'area' must be a finite number"),
    ({"id": {"a": 1}}, "'id' must be an integer"),   # was a TypeError from pycocotools
])
def test_malformed_annotations_are_refused_naming_file_and_id(tmp_path, edit, says):
    root, path = _with(tmp_path, annotations=[{**ann(9, 1, 3, [1, 2, 3, 4]), **edit}])
    with pytest.raises(ValueError, match=f"COCO: {path}: .*{says}"):
        COCO(root, path)


@pytest.mark.parametrize("points, says", [
    ([1, 2, 2] * 16 + [1, 2], "50 keypoint values, its category names 17 joints"),
    ([1, 2, 2] * 16 + [float("nan"), 2, 2], "'keypoints' must be a list of finite numbers"),
    ([1, 2, 2] * 16 + [1, 2, -1], r"keypoint visibility must be 0, 1 or 2, got \[-1\]"),
])
def test_malformed_keypoints_are_refused(tmp_path, points, says):
    person = [{"id": 1, "name": "person", "keypoints": list(COCO_PERSON_KEYPOINTS)}]
    root, path = _with(tmp_path, annotations=[{**ann(5, 1, 1, [1, 2, 3, 4]),
                                               "keypoints": points, "num_keypoints": 17}],
                       categories=person)
    with pytest.raises(ValueError, match=f"annotation 5: {says}"):
        COCO(root, path, task="keypoints")


def test_annotation_without_id_and_category_without_name_are_refused(tmp_path):
    """Found by tests/test_fuzz_files.py: a KeyError from pycocotools, or from the dataset."""
    no_id = {k: v for k, v in ann(9, 1, 3, [1, 2, 3, 4]).items() if k != "id"}
    root, path = _with(tmp_path, annotations=[no_id])
    with pytest.raises(ValueError, match=f"COCO: {path}: annotation \\[0\\]: 'id' must be an"):
        COCO(root, path)
    root, path = _with(tmp_path, categories=[{"id": 1}])
    with pytest.raises(ValueError, match=f"COCO: {path}: category 1 needs a 'name' string"):
        COCO(root, path)


def test_degenerate_orphan_and_repeated_entries_are_left_out_and_counted(tmp_path):
    images = _images(tmp_path / "val2017")
    images.append({**images[0], "file_name": "other.jpg"})       # id 1 again
    annotations = [ann(1, 1, 3, [2, 3, 10, 5]),
                   ann(2, 1, 3, [1000, 1000, 5, 5]),            # wholly outside 30 x 20
                   ann(3, 1, 3, [2, 3, 1e-30, 5]),              # no width in float32
                   ann(4, 1, 3, [2, 3, 0, 5]),
                   ann(5, 42, 3, [2, 3, 4, 5])]                  # image 42 is not listed
    root, path = _with(tmp_path, images, annotations)
    with pytest.warns(RuntimeWarning) as caught:
        ds = COCO(root, path)
    said = " | ".join(str(w.message) for w in caught)
    assert "1 image entry repeating an earlier id left out" in said
    assert "1 annotation(s) of image ids the file does not list left out" in said
    assert "3 box(es) with no area inside their image left out" in said
    assert ds[0]["info"]["file_name"] == "000000000001.jpg"
    np.testing.assert_allclose(ds[0]["boxes"], [[2, 3, 12, 8]])


def test_a_json_that_is_not_coco_is_one_clear_error(tmp_path):
    root = tmp_path / "val2017"
    _images(root)
    for text, says in [("[1, 2]", "not a COCO-format json"), ("{" * 100000, "not a readable json"),
                       ('{"images": [{"id": 1, "file_name": "a.jpg"}]}',
                        "image 1: 'width' must be a positive integer, got None")]:
        path = tmp_path / "x.json"
        path.write_text(text)
        with pytest.raises(ValueError, match=says):
            COCO(root, path)
