"""The detection task on the shared Trainer, with a stand-in detector of the zoo's interface
(tests/det_standins.py) and with the zoo's RetinaNet: smoke_detection's data trains,
evaluates by pycocotools and writes the classes; a run killed mid-way resumes bit-identical;
`tianyuan detect` draws boxes on a photo and lists them; the COCO recipes' numbers."""
import json

import cv2
import numpy as np
import pytest
from tr_helpers import (assert_same_optimizers, assert_same_state, build_with_hooks,
                        killed_and_resumed)

import tianyuan as ty
from tianyuan.trainers import cli, detect, train
from tianyuan.trainers.config import compose, to_dict

STAND_IN = ["model._target_=det_standins.TinyDetector", "~model.name"]
# the zoo's RetinaNet (ResNet-18) at a test's size: 16 FPN channels, multi-scale 48/64 pixels
RETINANET = ["model.fpn_channels=16", "model.min_size=[48,64]", "model.max_size=64",
             "data.batch_size=4"]


def det_cfg(root, out_dir, *overrides, model=STAND_IN):
    """smoke_detection on 48 generated 64-pixel images: 6 iterations a pass at batch 8."""
    return compose("train", ["experiment=smoke_detection", f"data.root={root}",
                             f"out_dir={out_dir}", "trainer.progress=false", *model,
                             "trainer.max_iters=6", "trainer.checkpoint_every=3",
                             "trainer.eval_every_iters=null", *overrides])


def test_smoke_detection_trains_evaluates_and_writes_classes(shapes_det_root, tmp_path, capsys):
    result = train.run(det_cfg(shapes_det_root, tmp_path, "trainer.log_every=2"))
    assert result["task"] == "detection" and result["iterations"] == 6
    assert result["classes"] == ["circle", "square", "triangle"]
    assert result["category_ids"] == [1, 2, 3]
    assert 0 <= result["val_AP"] <= 100 and set(result["val_per_class"]) == set(result["classes"])
    steps = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    losses = [s for s in steps if "loss_cls" in s]
    assert [s["iter"] for s in losses] == [2, 4, 6]
    assert all(np.isfinite([s["loss_cls"], s["loss_box_reg"]]).all() for s in losses)
    written = json.load(open(tmp_path / "coco_results.json"))
    assert written and set(written[0]) == {"image_id", "category_id", "bbox", "score"}
    assert json.load(open(tmp_path / "results.json"))["classes"][0] == "circle"
    assert "per_class" not in capsys.readouterr().out    # printed: scalars only


def test_killed_and_resumed_bit_identical(shapes_det_root, tmp_path):
    # 6 iterations a pass, 8 in all: checkpoints at 3 and 6, killed at 7, resumed from 6
    extra = ["trainer.max_iters=8", "data.flip=0.5"]
    reference, resumed = killed_and_resumed(
        lambda out: det_cfg(shapes_det_root, out, *extra), tmp_path, 7)
    assert resumed.iter == 8
    assert_same_state(reference.model.state_dict(), resumed.model.state_dict())
    assert_same_optimizers(reference, resumed)

def test_smoke_detection_retinanet_learns(shapes_det_root, tmp_path):
    # the zoo's RetinaNet from scratch with smoke_detection's optimizer, 200 iterations of 4
    # images of 64 pixels: the losses on a fixed batch fall by a quarter and more, and AP50
    # on the 16 validation images leaves 0 (an untrained head detects nothing). The
    # AP50 >= 80 gate is the recipe's full run (1200 iterations at 96 pixels, README).
    trainer = build_with_hooks(det_cfg(shapes_det_root, tmp_path, "trainer.max_iters=200",
                                       "schedule.warmup_iters=10", "model.min_size=64",
                                       "trainer.eval_every=0", "trainer.checkpoint_every=1000",
                                       *RETINANET[:1], *RETINANET[3:], model=()))
    batch = next(iter(trainer.loader))
    before = _losses(trainer.model, batch)
    trainer.train()
    after = _losses(trainer.model, batch)
    assert after["loss_box_reg"] < 0.75 * before["loss_box_reg"], (before, after)
    assert after["loss_cls"] < 0.75 * before["loss_cls"], (before, after)
    assert trainer.metrics["AP50"] > 5 and trainer.metrics["images"] == 16


def _losses(model, batch):
    from tianyuan.trainers.detection import detection_forward
    model.train()
    with ty.no_grad():
        return {k: float(v.item()) for k, v in detection_forward(model, batch).items()}


def test_retinanet_killed_and_resumed_bit_identical(shapes_det_root, tmp_path):
    # the zoo's model: batch norm statistics and the multi-scale draw (the framework's
    # generator) must come back too; 3 iterations, checkpoints at 2, killed at 3
    extra = ["trainer.max_iters=3", "trainer.checkpoint_every=2", *RETINANET]
    reference, resumed = killed_and_resumed(
        lambda out: det_cfg(shapes_det_root, out, *extra, model=()), tmp_path, 3)
    assert type(reference.model).__name__ == "RetinaNet" and resumed.iter == 3
    assert_same_state(reference.model.state_dict(), resumed.model.state_dict())

def test_retinanet_weights_through_eval_and_detect(shapes_det_root, tmp_path, capsys):
    # a run's weights, then `tianyuan eval` and `tianyuan detect` as a user types them
    train.run(det_cfg(shapes_det_root, tmp_path / "run", "trainer.max_iters=1", *RETINANET,
                      model=()))
    weights = tmp_path / "run" / "model_final.safetensors"
    model = ["model=retinanet_resnet18_fpn", "model.num_classes=3", "model.fpn_channels=16",
             "model.min_size=64", "model.max_size=64", f"weights={weights}"]
    assert cli.main(["eval", *model, "data=coco_shapes", f"data.root={shapes_det_root}",
                     f"out={tmp_path / 'eval.json'}", "progress=false"]) == 0
    result = json.load(open(tmp_path / "eval.json"))
    assert result["images"] == 16 and "AP50" in result and "AP" in capsys.readouterr().out
    # an untrained model scores below the model's 0.05: let every score through
    photo = f"{shapes_det_root}/val/images/000003.png"
    assert cli.main(["detect", *model, "model.score_thresh=0.0", f"input={photo}",
                     f"out={tmp_path / 'drawn'}", "threshold=0.0"]) == 0
    listed = json.load(open(tmp_path / "drawn" / "results.json"))
    assert listed and {r["category_name"] for r in listed} <= {"circle", "square", "triangle"}
    assert cv2.imread(str(tmp_path / "drawn" / "000003.png")).shape == (64, 64, 3)


def test_keep_empty_false_leaves_negatives_out_with_a_count(shapes_det_root, capsys):
    cfg = det_cfg(shapes_det_root, "unused", "data.keep_empty=false")
    from hydra.utils import instantiate
    loader, _, _ = instantiate(cfg.data, seed=0)
    said = capsys.readouterr().out
    assert "images have no boxes: left out" in said
    assert all(len(boxes) for batch in loader for boxes in batch["boxes"])


def _photo(path, height=120, width=160):
    image = np.full((height, width, 3), 90, np.uint8)       # grey: no box colour in it
    cv2.imwrite(str(path), image)
    return path


def test_detect_draws_boxes_on_a_photo_and_lists_them(tmp_path, capsys):
    photos = tmp_path / "photos"
    photos.mkdir()
    _photo(photos / "street.png")
    _photo(photos / "park.png", 100, 140)
    boxes = [[20, 30, 100, 90], [5, 5, 40, 25]]
    out = tmp_path / "drawn"
    status = cli.main(["detect", "+model._target_=det_standins.FixedDetector",
                       f"+model.boxes={boxes}", "+model.scores=[0.9,0.3]", "+model.labels=[1,18]",
                       f"input={photos}", f"out={out}", "--threshold", "0.5"])
    assert status == 0
    drawn = cv2.imread(str(out / "street.png"))[..., ::-1]           # RGB
    colour = np.array(detect.box_colour(1))
    # the kept box's edges (columns 20 and 99, row 89) are its colour; its inside is not
    for y, x in [(60, 20), (60, 21), (60, 99), (89, 60), (88, 60)]:
        assert np.array_equal(drawn[y, x], colour), (y, x)
    assert np.array_equal(drawn[60, 60], [90, 90, 90])
    # above the box: the label's patch in the box's colour, with text in it
    patch = drawn[18:29, 20:60]
    assert (patch == colour).all(-1).mean() > 0.3 and not (patch == colour).all()
    # the 0.3 box is below the threshold: not drawn
    assert not (drawn[5:26, 5:41] == np.array(detect.box_colour(18))).all(-1).any()
    results = json.load(open(out / "results.json"))
    assert [r["file_name"] for r in results] == ["park.png", "street.png"]
    assert results[1] == {"image_id": 2, "file_name": "street.png", "category_id": 1,
                          "category_name": "person", "score": pytest.approx(0.9),
                          "bbox": [20.0, 30.0, 80.0, 60.0]}
    assert "detections" in capsys.readouterr().out


def test_detect_class_names_from_a_training_run(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"classes": ["circle", "square"],
                                                       "category_ids": [1, 2]}))
    assert detect.class_names(None, str(tmp_path / "best.safetensors"), 2) == \
        (["circle", "square"], [1, 2])
    assert detect.class_names(["a", "b"], None, 2) == (["a", "b"], None)
    assert detect.class_names(None, None, 91)[0][1] == "person"
    assert detect.class_names(None, None, 2)[0] == ["class 0", "class 1"]
    image = np.zeros((50, 50, 3), np.uint8)
    drawn = detect.draw_detections(image, np.array([[10, 10, 40, 40]]), np.array([0.5]),
                                   np.array([7]), ["x"])
    assert np.array_equal(drawn[25, 10], detect.box_colour(7))      # "class 7": unnamed


def test_detect_needs_an_input(tmp_path):
    assert cli.main(["detect", "+model._target_=det_standins.FixedDetector",
                     "+model.boxes=[]", "+model.scores=[]", "+model.labels=[]",
                     f"input={tmp_path / 'nope.jpg'}", f"out={tmp_path}"]) == 2


def test_coco_recipes():
    cfg = to_dict(compose("train", ["experiment=retinanet_resnet50_fpn_coco_1x"]))
    assert cfg["task"]["_target_"].endswith("DetectionTask")
    assert cfg["trainer"]["max_iters"] == 90000 and cfg["trainer"]["max_epochs"] is None
    assert cfg["optim"]["lr"] == pytest.approx(0.01)          # 0.01 at 16 images
    assert cfg["schedule"]["milestones"] == [60000, 80000] and cfg["schedule"]["unit"] == "iter"
    assert cfg["schedule"]["warmup_iters"] > 0
    scaled = to_dict(compose("train", ["experiment=retinanet_resnet50_fpn_coco_1x",
                                       "data.batch_size=4"]))
    assert scaled["optim"]["lr"] == pytest.approx(0.01 * 4 / 16)
    assert cfg["model"]["pretrained_backbone"] and cfg["model"]["trainable_backbone_layers"] == 3
    assert cfg["model"]["min_size"] == [640, 672, 704, 736, 768, 800]      # multi-scale
    tune = to_dict(compose("train", ["experiment=retinanet_resnet50_fpn_finetune"]))
    assert tune["model"]["weights"] == "retinanet_resnet50_fpn.coco_torchvision"
    assert tune["model"]["trainable_backbone_layers"] == 3                 # stem + stage 1
    assert tune["data"]["kind"] == "coco_format"
