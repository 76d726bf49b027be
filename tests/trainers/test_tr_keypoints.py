"""The keypoints task on the shared Trainer: smoke_pose's generated people train SimpleBaseline
and MSPN (the loss falls), evaluate by pycocotools and write the COCO keypoint results and
the joints; a run killed mid-way resumes bit-identical; the COCO recipes' scale rules; eval's
data=coco_keypoints picks the task. Tiny: 24 generated images, 64-pixel crops."""
import json

import numpy as np
import pytest
from tr_helpers import (assert_same_optimizers, assert_same_state, build_with_hooks,
                        killed_and_resumed)

from tianyuan.trainers import train
from tianyuan.trainers.config import compose


def pose_cfg(root, out_dir, *overrides):
    """smoke_pose on 24 generated images (about 48 people): batch 8, checkpoints every 3."""
    return compose("train", ["experiment=smoke_pose", f"data.root={root}",
                             f"out_dir={out_dir}", "trainer.progress=false",
                             "data.batch_size=8", "trainer.max_iters=4",
                             "trainer.checkpoint_every=3", "trainer.eval_every_iters=null",
                             "trainer.num_threads=1", *overrides])


def test_smoke_pose_trains_evaluates_and_writes_the_joints(people_root, tmp_path):
    result = train.run(pose_cfg(people_root, tmp_path, "trainer.log_every=2"))
    assert result["task"] == "keypoints" and result["iterations"] == 4
    assert 0 <= result["val_AP"] <= 100 and "val_AR" in result
    assert result["num_joints"] == 17 and result["input_size"] == [64, 64]
    steps = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert [s["iter"] for s in steps if "loss_heatmap" in s] == [2, 4]
    written = json.load(open(tmp_path / "keypoint_results.json"))
    assert written and len(written[0]["keypoints"]) == 51
    saved = json.load(open(tmp_path / "results.json"))
    assert saved["flip_pairs"][0] == [1, 2] and saved["num_joints"] == 17


@pytest.mark.parametrize("model,losses", [("simplebaseline_small", ["loss_heatmap"]),
                                          ("mspn_small", ["loss_coarse", "loss_ohkm"])])
def test_the_loss_falls(people_root, tmp_path, model, losses):
    trainer = build_with_hooks(pose_cfg(people_root, tmp_path, f"model={model}",
                                        "trainer.max_iters=24", "trainer.log_every=4",
                                        "trainer.eval_every=0", "trainer.checkpoint_every=100"))
    trainer.train()
    steps = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    total = [sum(s[k] for k in losses) for s in steps if losses[0] in s]
    assert len(total) == 6 and np.isfinite(total).all()
    assert total[-1] < 0.7 * total[0], total


def test_killed_and_resumed_bit_identical(people_root, tmp_path):
    # checkpoints at 3 and 6, killed at 7, resumed from 6
    extra = ["trainer.max_iters=8", "trainer.eval_every=0", "model=mspn_small"]
    reference, resumed = killed_and_resumed(
        lambda out: pose_cfg(people_root, out, *extra), tmp_path, 7)
    assert resumed.iter == 8
    assert_same_state(reference.model.state_dict(), resumed.model.state_dict())
    assert_same_optimizers(reference, resumed)


def test_the_data_decides_the_joint_count(people_root, tmp_path, capsys):
    trainer = build_with_hooks(pose_cfg(people_root, tmp_path, "model.num_joints=5",
                                        "trainer.max_iters=1", "trainer.eval_every=0"))
    assert trainer.model.num_joints == 17
    assert "17 joints, from the data" in capsys.readouterr().out


def test_recipes_scale_their_lr_with_the_total_batch():
    base = compose("train", ["experiment=simplebaseline_res50_coco_256x192",
                             "data.batch_size=32", "total_batch=128"])
    assert base.optim.lr == pytest.approx(1e-3) and base.schedule.milestones == [90, 120]
    assert base.trainer.max_epochs == 140 and base.model.name == "simplebaseline_res50"
    one = compose("train", ["experiment=simplebaseline_res50_coco_256x192", "data.batch_size=32"])
    assert one.optim.lr == pytest.approx(2.5e-4)
    mspn = compose("train", ["experiment=mspn_4stage_coco_256x192", "data.batch_size=32",
                             "total_batch=256"])
    assert mspn.optim.lr == pytest.approx(2.4e-3) and mspn.trainer.max_epochs == 200
    assert mspn.model.name == "mspn_4stage" and mspn.schedule.warmup_factor == 0.1


def test_eval_with_coco_keypoints_data_picks_the_task():
    cfg = compose("eval", ["model=simplebaseline_res50", "data=coco_keypoints"])
    assert cfg.task._target_ == "tianyuan.trainers.keypoints.KeypointTask"
