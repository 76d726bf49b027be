import os

import cv2
import numpy as np

from tianyuan.datasets.synthetic import SHAPE_NAMES, ShapesDataset, make_shapes, write_image_folder


def test_make_shapes_is_deterministic_and_balanced():
    images, labels = make_shapes(40, size=16, seed=3)
    again, labels2 = make_shapes(40, size=16, seed=3)
    other, _ = make_shapes(40, size=16, seed=4)
    assert images.shape == (40, 16, 16, 3) and images.dtype == np.uint8
    assert labels.dtype == np.int64 and np.bincount(labels).tolist() == [4] * 10
    assert np.array_equal(images, again) and np.array_equal(labels, labels2)
    assert not np.array_equal(images, other)


def test_shapes_classes_differ_on_average():
    # Mean foreground masks per class must differ: a crude check that classes are not noise.
    images, labels = make_shapes(200, size=32, seed=0)
    grey = images.astype(np.float32).mean(-1)
    centred = np.abs(grey - np.median(grey, axis=(1, 2), keepdims=True))
    means = np.stack([centred[labels == k].mean(0) for k in range(10)])
    dist = np.abs(means[:, None] - means[None]).mean((-1, -2))
    assert (dist + np.eye(10) * 1e9).min() > 1.0


def test_write_image_folder_and_dataset(tmp_path):
    count = write_image_folder(str(tmp_path), num_per_class=2, size=16, seed=1)
    assert count == 20
    folders = sorted(os.listdir(tmp_path))
    assert folders[0] == "00_circle" and len(folders) == 10
    png = cv2.imread(str(tmp_path / folders[0] / "00000.png"))
    assert png.shape == (16, 16, 3)
    train, test = ShapesDataset(20, train=True), ShapesDataset(20, train=False)
    item = train[0]
    assert set(item) == {"image", "label", "info"} and item["image"].shape == (32, 32, 3)
    assert 0 <= item["label"] < len(SHAPE_NAMES)
    assert not np.array_equal(train.images, test.images)
