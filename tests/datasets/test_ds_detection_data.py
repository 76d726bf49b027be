"""Detection data for training: the flip and multi-scale resize move the boxes with the
pixels, batches are per-image lists of one aspect-ratio group, crowd boxes stay out of the
targets, workers give the main process's batches, images convert to the model's [0, 1] CHW."""
import json

import cv2
import numpy as np
import pytest

from tianyuan.datasets import list_collate
from tianyuan.datasets.transforms import model_images, sample_rng
from tianyuan.trainers.detection import detection_data, train_transform


def _item(height=40, width=60):
    image = np.zeros((height, width, 3), np.uint8)
    image[10:20, 5:25] = 255                                    # a white box at x 5..25, y 10..20
    return {"image": image, "boxes": np.array([[5, 10, 25, 20]], np.float32),
            "labels": np.array([1]), "crowd_boxes": np.zeros((0, 4), np.float32),
            "info": {"image_id": 1}}


def _white_extent(image):
    ys, xs = np.nonzero(image[..., 0] > 127)
    return [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]


def test_flip_and_multiscale_resize_move_boxes_with_pixels():
    transform = train_transform(flip=1.0, train_resize={"min_size": [20, 80], "max_size": 1000})
    sizes = set()
    for k in range(12):
        with sample_rng(np.random.SeedSequence([k])):
            out = transform(_item())
        sizes.add(out["image"].shape[0])
        np.testing.assert_allclose(out["boxes"][0], _white_extent(out["image"]), atol=1)
        assert out["info"]["scale_factor"][0] == out["image"].shape[0] / 40
    assert sizes == {20, 80}                                   # the shorter side, multi-scale
    same = train_transform(flip=0.0)(_item())
    assert np.array_equal(same["boxes"], _item()["boxes"])


def _folder(tmp_path, shapes):
    """A COCO-format folder: one image per (height, width), a box each; image 1 has a crowd
    box too; the last has no box."""
    images, anns = [], []
    for i, (h, w) in enumerate(shapes, 1):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.full((h, w, 3), i * 10, np.uint8))
        images.append({"id": i, "file_name": f"{i}.png", "height": h, "width": w})
        if i < len(shapes):
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": 5, "iscrowd": 0,
                         "bbox": [1, 2, 6, 5], "area": 30})
    anns.append({"id": 99, "image_id": 1, "category_id": 5, "iscrowd": 1, "bbox": [0, 0, 8, 8],
                 "area": 64, "segmentation": {"counts": [0, 4], "size": [2, 2]}})
    ann = tmp_path / "ann.json"
    ann.write_text(json.dumps({"images": images, "annotations": anns,
                               "categories": [{"id": 5, "name": "thing"}]}))
    return ann


SHAPES = [(20, 30), (30, 20), (22, 34), (34, 22), (20, 36), (36, 20), (24, 30), (30, 24)]


def test_batches_are_lists_of_one_aspect_group(tmp_path):
    ann = _folder(tmp_path, SHAPES)
    split = {"images": str(tmp_path), "ann_file": str(ann)}
    loader, val, meta = detection_data("coco_format", None, batch_size=2, train=split,
                                       val=split, flip=0.0, seed=3)
    assert meta == {"classes": ["thing"], "category_ids": [5], "ann_file": str(ann)}
    batches = list(loader)
    assert len(batches) == len(loader) == 4
    for batch in batches:
        assert isinstance(batch["image"], list) and isinstance(batch["boxes"], list)
        landscape = {im.shape[1] > im.shape[0] for im in batch["image"]}
        assert len(landscape) == 1                           # one aspect-ratio group
    first = [b for b in batches if any(i["image_id"] == 1 for i in b["info"])][0]
    k = [i["image_id"] for i in first["info"]].index(1)
    assert len(first["boxes"][k]) == 1 and len(first["crowd_boxes"][k]) == 1   # crowd apart
    empty = [b for b in batches if any(i["image_id"] == 8 for i in b["info"])]
    assert empty and len(empty[0]["boxes"][[i["image_id"] for i in empty[0]["info"]].index(8)]) == 0
    assert sum(len(b["image"]) for b in val) == 8            # val: every image, in order


def test_workers_give_the_main_process_batches(tmp_path):
    ann = _folder(tmp_path, SHAPES)
    split = {"images": str(tmp_path), "ann_file": str(ann)}
    kwargs = dict(batch_size=2, train=split, val=split, splits=("train",), seed=1,
                  train_resize={"min_size": [16, 24], "max_size": 100})
    main, _, _ = detection_data("coco_format", None, num_workers=0, **kwargs)
    workers, _, _ = detection_data("coco_format", None, num_workers=2, **kwargs)
    for a, b in zip(main, workers):
        assert [i["image_id"] for i in a["info"]] == [i["image_id"] for i in b["info"]]
        for x, y in zip(a["image"] + a["boxes"], b["image"] + b["boxes"]):
            assert np.array_equal(x, y)


def test_model_images_and_list_collate():
    items = [_item(), _item(30, 50), None]
    batch = list_collate(items)
    assert len(batch["image"]) == 2 and batch["image"][1].shape == (30, 50, 3)
    images = model_images(batch["image"])
    assert images[0].shape == (3, 40, 60) and images[0].dtype == np.float32
    assert images[0].max() == 1.0 and images[0][:, 15, 10].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="expected an \\(H, W, 3\\) RGB image"):
        model_images([np.zeros((3, 8, 8), np.float32)])
