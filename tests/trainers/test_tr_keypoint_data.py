"""The keypoint data configs: generated people through hydra to (train, val, meta) loaders of
stacked person crops; COCO-format data needs its paths; train and val must name the same
joints."""
import json
import os

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from tianyuan.trainers.keypoint_data import keypoint_data

CONF = os.path.join(os.path.dirname(__file__), "..", "..", "trainers", "conf")
TINY = ["data.synthetic.num_train=12", "data.synthetic.num_val=4", "data.synthetic.size=96"]


def _data(*overrides):
    with initialize_config_dir(config_dir=os.path.abspath(CONF), version_base=None):
        cfg = compose("train", overrides=list(overrides))
    return cfg, instantiate(cfg.data, seed=0)


def test_people_through_the_config(tmp_path):
    cfg, (train, val, meta) = _data("data=people_shapes", f"data.root={tmp_path}", *TINY,
                                    "data.batch_size=4")
    assert cfg.task._target_.endswith("KeypointTask")
    batch = next(iter(train))
    assert batch["image"].shape == (4, 3, 128, 96) and batch["target"].shape == (4, 17, 32, 24)
    assert batch["target_weight"].shape == (4, 17) and batch["center"].dtype == np.float32
    assert len(train) == len(train.dataset) // 4                    # whole batches only
    crops = sum(len(b["image_id"]) for b in val)
    assert crops == len(val.dataset) == len(meta["coco"].anns)      # every person, once
    assert meta["num_joints"] == 17 and [1, 2] in meta["flip_pairs"]
    assert len(meta["skeleton"]) == 19 and meta["skeleton"][0] == (15, 13)
    assert meta["input_size"] == [128, 96] and meta["heatmap_size"] == [32, 24]
    assert meta["ann_file"].endswith(os.path.join("val", "annotations.json"))
    again = keypoint_data("people", str(tmp_path), batch_size=4, input_size=(128, 96),
                          heatmap_size=(32, 24), sigma=1.5, scale_factor=0.25, rotation=30,
                          half_body=None, splits=("train",))[0]
    first = next(iter(again))
    assert np.array_equal(first["image"], batch["image"])           # same seed, same crops


def test_coco_format_needs_its_paths_and_matching_joints(tmp_path):
    with pytest.raises(ValueError, match=r"data.train.images and data.train.ann_file"):
        keypoint_data("coco_format", str(tmp_path))
    with pytest.raises(ValueError, match="kind must be one of"):
        keypoint_data("mpii", str(tmp_path))
    keypoint_data("people", str(tmp_path / "p"), synthetic={"num_train": 4, "num_val": 2},
                  splits=())
    val = json.load(open(tmp_path / "p" / "val" / "annotations.json"))
    val["categories"][0]["keypoints"][0] = "snout"
    (tmp_path / "p" / "val" / "annotations.json").write_text(json.dumps(val))
    with pytest.raises(ValueError, match="train and val jsons name other joints"):
        keypoint_data("people", str(tmp_path / "p"))
