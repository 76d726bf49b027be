import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def shapes_root(tmp_path_factory):
    """A small generated ImageFolder tree (root/train, root/val), shared by the tests."""
    from tianyuan.trainers.classification import shapes_folder
    root = str(tmp_path_factory.mktemp("data") / "shapes")
    return shapes_folder(root, num_per_class=30, val_per_class=5, size=32, num_classes=10, seed=0)


@pytest.fixture(scope="session")
def shapes_det_root(tmp_path_factory):
    """Generated COCO-format detection data: 48 training and 16 validation 64-pixel images."""
    from tianyuan.trainers.detection import shapes_coco
    root = str(tmp_path_factory.mktemp("data") / "shapes_det")
    return shapes_coco(root, num_train=48, num_val=16, size=64, num_classes=3, seed=0)


@pytest.fixture(scope="session")
def people_root(tmp_path_factory):
    """Generated COCO-format people (stick figures): 24 training and 4 validation images."""
    from tianyuan.trainers.keypoint_data import people_coco
    return people_coco(str(tmp_path_factory.mktemp("data") / "people"), num_train=24,
                       num_val=4, size=96, seed=0)
