"""Faster R-CNN on the detection task, unchanged: smoke_fasterrcnn's recipe trains, evaluates
by pycocotools and resumes; its weights go through `tianyuan detect`, which draws its boxes;
the COCO recipe's numbers. The AP50 >= 80 gate is the recipe's full run (its commit)."""
import json

import cv2
import numpy as np
import pytest
from tr_helpers import assert_same_optimizers, assert_same_state, killed_and_resumed

from tianyuan.trainers import cli, train
from tianyuan.trainers.config import compose, to_dict

# fasterrcnn_small at a test's size: 16 FPN channels, a 32-wide box head, 64 pixels
TINY = ["model.fpn_channels=16", "model.representation_size=32", "model.min_size=64",
        "model.max_size=64", "data.batch_size=4"]


def frcnn_cfg(root, out_dir, *overrides):
    return compose("train", ["experiment=smoke_fasterrcnn", f"data.root={root}",
                             f"out_dir={out_dir}", "trainer.progress=false", *TINY,
                             "trainer.max_iters=3", "trainer.checkpoint_every=3",
                             "trainer.eval_every_iters=null", *overrides])


def test_fasterrcnn_killed_and_resumed_bit_identical(shapes_det_root, tmp_path):
    # the RPN's and RoI heads' samplers draw from the framework's generator: it must come back
    # with the checkpoint; 3 iterations, a checkpoint at 2, killed at 3
    reference, resumed = killed_and_resumed(
        lambda out: frcnn_cfg(shapes_det_root, out, "trainer.checkpoint_every=2"), tmp_path, 3)
    assert type(reference.model).__name__ == "FasterRCNN" and resumed.iter == 3
    assert_same_state(reference.model.state_dict(), resumed.model.state_dict())
    assert_same_optimizers(reference, resumed)


def test_smoke_fasterrcnn_trains_evaluates_and_detect_draws(shapes_det_root, tmp_path):
    result = train.run(frcnn_cfg(shapes_det_root, tmp_path / "run", "trainer.log_every=1"))
    assert result["task"] == "detection" and result["iterations"] == 3
    assert 0 <= result["val_AP50"] <= 100 and result["val_detections"] > 0
    steps = [json.loads(line) for line in open(tmp_path / "run" / "log.jsonl")]
    losses = [s for s in steps if "loss_classifier" in s]
    assert [s["iter"] for s in losses] == [1, 2, 3]
    assert all(np.isfinite([s[k] for k in ("loss_objectness", "loss_rpn_box_reg",
                                           "loss_classifier", "loss_box_reg")]).all()
               for s in losses)
    weights = tmp_path / "run" / "model_final.safetensors"
    photo = f"{shapes_det_root}/val/images/000003.png"
    model = ["model=fasterrcnn_small", "model.num_classes=3", "model.fpn_channels=16",
             "model.representation_size=32", "model.min_size=64", "model.max_size=64",
             "model.box_score_thresh=0.0", f"weights={weights}"]
    assert cli.main(["detect", *model, f"input={photo}", f"out={tmp_path / 'drawn'}",
                     "threshold=0.0"]) == 0
    listed = json.load(open(tmp_path / "drawn" / "results.json"))
    assert listed and {r["category_name"] for r in listed} <= {"circle", "square", "triangle"}
    drawn = cv2.imread(str(tmp_path / "drawn" / "000003.png"))
    assert drawn.shape == (64, 64, 3)
    assert not np.array_equal(drawn, cv2.imread(photo))            # boxes were drawn


def test_fasterrcnn_coco_recipe():
    cfg = to_dict(compose("train", ["experiment=fasterrcnn_resnet50_fpn_coco_1x"]))
    assert cfg["model"]["name"] == "fasterrcnn_resnet50_fpn" and cfg["model"]["extra_background"]
    assert cfg["trainer"]["max_iters"] == 90000 and cfg["optim"]["lr"] == pytest.approx(0.02)
    assert cfg["schedule"]["milestones"] == [60000, 80000] and cfg["schedule"]["warmup_iters"] > 0
    scaled = to_dict(compose("train", ["experiment=fasterrcnn_resnet50_fpn_coco_1x",
                                       "data.batch_size=2"]))
    assert scaled["optim"]["lr"] == pytest.approx(0.02 * 2 / 16)
    smoke = to_dict(compose("train", ["experiment=smoke_fasterrcnn"]))
    assert smoke["model"]["name"] == "fasterrcnn_small" and smoke["data"]["kind"] == "shapes"
