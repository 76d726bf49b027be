"""`tianyuan pose`: on a generated stick-figure photo, a stand-in model whose heatmaps put the
joints at known crop positions has its skeleton drawn where the decoded joints are (limb
pixels checked) and listed as COCO keypoint results; people from a boxes file; the zoo's
small pose model runs through the command line."""
import json

import cv2
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn
from tianyuan.datasets.coco import COCO_LIMBS
from tianyuan.datasets.synthetic_people import make_people
from tianyuan.evaluation.drawing import limb_colour
from tianyuan.trainers import cli, pose
from tianyuan.trainers.config import compose

# joints at heatmap pixels (x, y) of a 16 x 16 map: a figure standing in the crop's middle
SPOTS = np.array([[8, 2], [9, 2], [7, 2], [10, 2], [6, 2], [10, 4], [6, 4], [11, 6], [5, 6],
                  [12, 8], [4, 8], [10, 8], [6, 8], [10, 11], [6, 11], [10, 14], [6, 14]])


class FixedPose(nn.Module):
    """Heatmaps (N, 17, 16, 16) peaked at SPOTS whatever the crop."""
    num_joints = 17

    def forward(self, x):
        maps = np.zeros((x.shape[0], 17, 16, 16), np.float32)
        maps[:, np.arange(17), SPOTS[:, 1], SPOTS[:, 0]] = 0.9
        return ty.tensor(maps)


@pytest.fixture()
def photo(tmp_path):
    image, people, boxes = make_people(1, size=128, seed=3)[0]
    path = tmp_path / "people.png"
    cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    return path, image, boxes


def _run(tmp_path, monkeypatch, path, *overrides):
    monkeypatch.setattr(pose, "build_model", lambda *a, **k: FixedPose())
    cfg = compose("pose", ["model=simplebaseline_small", f"input={path}",
                           f"out={tmp_path / 'out'}", "input_size=[64,64]", "flip=false",
                           "progress=false", *overrides])
    summary = pose.run(cfg)
    results = json.load(open(tmp_path / "out" / "results.json"))
    drawn = cv2.cvtColor(cv2.imread(str(tmp_path / "out" / path.name)), cv2.COLOR_BGR2RGB)
    return summary, results, drawn


def test_skeleton_drawn_at_the_decoded_joints(tmp_path, monkeypatch, photo):
    path, image, _ = photo
    summary, results, drawn = _run(tmp_path, monkeypatch, path)
    assert summary["people"] == 1 and len(results) == 1          # the whole image
    person = np.array(results[0]["keypoints"]).reshape(17, 3)
    assert results[0]["file_name"] == "people.png" and results[0]["category_id"] == 1
    # the whole 128-pixel image is a 160-pixel crop (1.25 padding) onto 64 pixels: heatmap
    # pixel j at 10 image pixels, from -16
    np.testing.assert_allclose(person[:, :2], SPOTS * 10.0 - 16.0, atol=2.6)  # + quarter shift
    assert np.all(person[:, 2] > 0.8)
    checked = 0
    for index, (a, b) in enumerate(COCO_LIMBS):
        middle = (person[a, :2] + person[b, :2]) / 2
        x, y = np.round(middle).astype(int)
        clear = np.hypot(*(person[:, :2] - middle).T).min() > 6      # no joint's dot on it
        if 0 <= x < 128 and 0 <= y < 128 and clear:
            assert np.abs(drawn[y, x].astype(int) - limb_colour(index)).max() <= 40, index
            checked += 1
    assert checked >= 8
    assert np.abs(drawn.astype(int) - image).max() > 100           # something was drawn


def test_people_from_a_boxes_file(tmp_path, monkeypatch, photo):
    path, _, boxes = photo
    listed = [{"file_name": path.name, "category_id": 1, "bbox": b, "score": 0.9}
              for b in boxes.tolist()]
    listed.append({"file_name": path.name, "category_id": 2, "bbox": [0, 0, 5, 5], "score": 1})
    (tmp_path / "boxes.json").write_text(json.dumps(listed))
    summary, results, _ = _run(tmp_path, monkeypatch, path, f"boxes={tmp_path / 'boxes.json'}")
    assert summary["people"] == len(boxes) == len(results)      # the non-person left out
    for box, result in zip(boxes, results):
        person = np.array(result["keypoints"]).reshape(17, 3)
        x, y, w, h = box
        assert x - w < person[:, 0].mean() < x + 2 * w and y - h < person[:, 1].mean() < y + 2 * h
        assert 0 < result["score"] <= 0.9


def test_the_command_runs_a_zoo_pose_model(tmp_path, photo):
    path = photo[0]
    status = cli.main(["pose", "model=simplebaseline_small", f"input={path}",
                       f"out={tmp_path / 'out'}", "input_size=[64,64]", "progress=false"])
    assert status == 0
    results = json.load(open(tmp_path / "out" / "results.json"))
    assert len(results) == 1 and len(results[0]["keypoints"]) == 17 * 3
    assert cli.main(["pose", "model=simplebaseline_small", "progress=false"]) == 2  # no input
