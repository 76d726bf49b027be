"""Generated detection data: deterministic per seed, boxes around the drawn shapes, a
COCO-format folder the datasets read back (labels, boxes, negatives)."""
import json

import numpy as np

from tianyuan.datasets import CocoFormat
from tianyuan.datasets.synthetic import SHAPE_NAMES
from tianyuan.datasets.synthetic_boxes import make_shape_boxes, write_coco_shapes


def test_deterministic_per_seed_with_negatives():
    a, b = make_shape_boxes(30, size=64, seed=3), make_shape_boxes(30, size=64, seed=3)
    other = make_shape_boxes(30, size=64, seed=4)
    for (ia, ba, la), (ib, bb, lb) in zip(a, b):
        assert np.array_equal(ia, ib) and np.array_equal(ba, bb) and np.array_equal(la, lb)
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(a, other))
    counts = [len(labels) for _, _, labels in make_shape_boxes(200, size=64, seed=0)]
    assert 0 in counts and max(counts) == 3        # negatives (~5 %) and up to 3 shapes
    labels = np.concatenate([l for _, _, l in make_shape_boxes(200, size=64, seed=0)])
    assert set(labels.tolist()) == {0, 1, 2}


def test_boxes_enclose_the_drawn_shapes_and_keep_apart():
    for image, boxes, labels in make_shape_boxes(20, size=96, seed=1, empty_fraction=0.0):
        assert boxes.dtype == np.float32 and labels.dtype == np.int64 and len(boxes)
        background = np.median(image.reshape(-1, 3), 0)
        changed = np.abs(image.astype(np.float32) - background).max(-1) > 60   # (H, W)
        inside = np.zeros_like(changed)
        for x1, y1, x2, y2 in boxes:
            assert 0 <= x1 < x2 <= 96 and 0 <= y1 < y2 <= 96
            inside[int(y1):int(np.ceil(y2)), int(x1):int(np.ceil(x2))] = True
            # a shape fills a good part of its box, up to each edge
            region = changed[int(y1):int(np.ceil(y2)), int(x1):int(np.ceil(x2))]
            assert region.mean() > 0.3
            assert region[:2].any() and region[-2:].any()
            assert region[:, :2].any() and region[:, -2:].any()
        assert not (changed & ~inside).sum() > 3            # nothing drawn outside the boxes
        for i in range(len(boxes)):                         # boxes do not overlap
            for j in range(i):
                a, b = boxes[i], boxes[j]
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def test_written_folder_reads_back_as_coco_format(tmp_path):
    ann_file = write_coco_shapes(str(tmp_path), 12, size=64, num_classes=3, seed=2)
    data = json.load(open(ann_file))
    assert [c["name"] for c in data["categories"]] == list(SHAPE_NAMES[:3])
    ds = CocoFormat(tmp_path / "images", ann_file)
    assert len(ds) == 12 and ds.classes == list(SHAPE_NAMES[:3])
    expected = make_shape_boxes(12, size=64, num_classes=3, seed=2)
    for item, (image, boxes, labels) in zip(ds, expected):
        assert np.array_equal(item["image"], image)               # PNG: lossless
        np.testing.assert_allclose(item["boxes"], boxes, atol=1e-4)
        assert np.array_equal(item["labels"], labels)
