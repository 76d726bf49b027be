"""Keypoint decoding, flip test, OKS-NMS and KeypointEvaluator on pycocotools: ground-truth
heatmaps rendered from a COCO-format fake score AP >= 99 through the whole pipeline."""
import json

import numpy as np
import pytest

from tianyuan.datasets import CocoFormat, TopDownKeypoints, default_collate
from tianyuan.datasets.synthetic_people import write_coco_people
from tianyuan.evaluation import (KeypointEvaluator, flip_back, flip_test, get_final_preds,
                                 get_max_preds, oks_nms)
from tianyuan.evaluation.keypoint_decode import oks_iou, rescore


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    root = tmp_path_factory.mktemp("people")
    ann_file = write_coco_people(str(root), 6, size=128, seed=5)
    return CocoFormat(root / "images", ann_file, task="keypoints"), ann_file


def _batches(dataset, size=8):
    return [default_collate([dataset[i] for i in range(s, min(s + size, len(dataset)))])
            for s in range(0, len(dataset), size)]


def test_max_and_quarter_pixel_shift():
    heatmaps = np.zeros((1, 3, 8, 8), np.float32)
    heatmaps[0, 0, 4, 3], heatmaps[0, 0, 4, 4], heatmaps[0, 0, 5, 3] = 1.0, 0.5, 0.2
    heatmaps[0, 1, 0, 6] = 0.7                         # on the border: no shift
    coords, maxvals = get_max_preds(heatmaps)
    assert coords[0].tolist() == [[3, 4], [6, 0], [0, 0]] and maxvals[0, :, 0].tolist() == \
        [1.0, pytest.approx(0.7), 0.0]
    preds, _ = get_final_preds(heatmaps, np.array([[100.0, 50.0]]), np.array([[16.0, 16.0]]))
    # heatmap (3.25, 4.25) -> image 100 + (3.25 - 4) * 2, 50 + (4.25 - 4) * 2
    np.testing.assert_allclose(preds[0, :2], [[98.5, 50.5], [104.0, 42.0]])


def test_flip_back_mirrors_and_swaps():
    heatmaps = np.arange(2 * 3 * 2 * 4, dtype=np.float32).reshape(2, 3, 2, 4)
    out = flip_back(heatmaps, [(1, 2)])
    assert np.array_equal(out[:, 0], heatmaps[:, 0, :, ::-1])
    assert np.array_equal(out[:, 1], heatmaps[:, 2, :, ::-1])
    assert np.array_equal(flip_back(out, [(1, 2)]), heatmaps)


def test_oks_nms_drops_near_duplicates_only():
    rng = np.random.default_rng(0)
    person = np.concatenate([rng.uniform(0, 100, (17, 2)), np.ones((17, 1))], 1)
    near, other = person.copy(), person.copy()
    near[:, :2] += 0.5
    other[:, :2] += 40
    keypoints = np.stack([near, person, other])
    assert oks_iou(person, near[None], 5000, [5000])[0] > 0.9
    assert oks_nms(keypoints, [0.8, 0.9, 0.7], [5000] * 3) == [1, 2]
    assert rescore(np.c_[person[:, :2], np.r_[[0.1] * 7, [0.5] * 10]], 0.8) == \
        pytest.approx(0.4)


def _evaluate(dataset, ann_file, outputs, tmp_path=None, **kwargs):
    results = None if tmp_path is None else str(tmp_path / "kp_results.json")
    evaluator = KeypointEvaluator(ann_file, results_file=results, **kwargs)
    for batch, heatmaps in zip(_batches(dataset), outputs):
        evaluator.process(batch, heatmaps)
    return evaluator.evaluate(), evaluator


def test_ground_truth_heatmaps_score_ap_99(people, tmp_path):
    base, ann_file = people
    plain = TopDownKeypoints(base)                              # 256 x 192 -> 64 x 48
    mirrored = TopDownKeypoints(base, train=True, flip=1.0, scale_factor=0.0, rotation=0,
                                half_body=None)
    batches, mirrored_batches = _batches(plain), _batches(mirrored)
    outputs = []
    for batch, flipped in zip(batches, mirrored_batches):
        answers = iter([batch["target"], flipped["target"]])      # a "model" of the truth
        outputs.append(flip_test(lambda images: next(answers), batch["image"],
                                 plain.flip_pairs))
    metrics, evaluator = _evaluate(plain, ann_file, outputs, tmp_path)
    assert metrics["AP"] >= 99.0 and metrics["AR"] >= 99.0, evaluator.summary
    assert metrics["persons"] == len(plain) == len(base.api.anns)
    written = json.load(open(tmp_path / "kp_results.json"))
    assert len(written) == len(plain) and len(written[0]["keypoints"]) == 51
    # the same heatmaps two heatmap pixels off in x (about 2.5 image pixels) lose AP
    shifted = [np.roll(o, 2, axis=3) for o in outputs]
    assert _evaluate(plain, ann_file, shifted)[0]["AP"] < 95.0


def test_flip_without_shift_is_one_pixel_off(people):
    base, _ = people
    plain = TopDownKeypoints(base)
    mirrored = TopDownKeypoints(base, train=True, flip=1.0, scale_factor=0.0, rotation=0,
                                half_body=None)
    a, b = _batches(plain)[0], _batches(mirrored)[0]
    peaks = lambda h: get_max_preds(h)[0]
    back = flip_back(b["target"], plain.flip_pairs)
    assert np.abs(peaks(back) - peaks(a["target"]))[..., 0].max() >= 1
    back[..., 1:] = back[..., :-1].copy()
    assert np.abs(peaks(back) - peaks(a["target"])).max() <= 1


def test_detections_are_rescored_and_nmsed(people):
    base, ann_file = people
    plain = TopDownKeypoints(base)
    batch = _batches(plain)[0]
    evaluator = KeypointEvaluator(ann_file)
    evaluator.process(batch, batch["target"])
    evaluator.process(batch, batch["target"] * 0.5)             # the same people again
    results = evaluator.results()
    assert len(results) == len(batch["image_id"])               # duplicates dropped by OKS-NMS
    assert all(r["score"] == pytest.approx(1.0) for r in results)


def test_wrong_joint_count_and_sigmas_are_clear_errors(people, tmp_path):
    base, ann_file = people
    batch = _batches(TopDownKeypoints(base, input_size=(64, 48), heatmap_size=(16, 12)))[0]
    evaluator = KeypointEvaluator(ann_file)
    with pytest.raises(ValueError, match="names 17 joints but the model predicts 16"):
        evaluator.process(batch, batch["target"][:, :16])
    data = json.load(open(ann_file))
    data["categories"][0]["keypoints"] = data["categories"][0]["keypoints"][:16]
    for ann in data["annotations"]:
        ann["keypoints"] = ann["keypoints"][:48]
    path = tmp_path / "sixteen.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="16 joints; COCO's OKS sigmas are for 17"):
        KeypointEvaluator(str(path))
    assert KeypointEvaluator(str(path), sigmas=[0.05] * 16).num_joints == 16


def test_ground_truth_num_keypoints_is_repaired(people, tmp_path):
    _, ann_file = people
    data = json.load(open(ann_file))
    data["annotations"][0]["num_keypoints"] = 0                # would be ignored by COCOeval
    del data["annotations"][1]["area"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match="1 num_keypoints disagreeing.*annotation 1 says 0"
                      r".*1 annotation\(s\) without 'area'"):
        evaluator = KeypointEvaluator(str(path))
    assert evaluator.gt.anns[1]["num_keypoints"] == 17


class _Oracle:
    """A "model" answering each crop with its ground-truth heatmaps."""

    def __init__(self, dataset):
        self.answers = {}
        for batch in _batches(dataset):
            for image, target in zip(batch["image"], batch["target"]):
                self.answers[image.tobytes()] = target

    def eval(self):
        return self

    def __call__(self, images):
        import tianyuan as ty
        return ty.tensor(np.stack([self.answers[i.tobytes()] for i in images.numpy()]))


def test_inference_drives_the_evaluator(people):
    from tianyuan.datasets import DataLoader
    from tianyuan.evaluation import inference
    base, ann_file = people
    plain = TopDownKeypoints(base, input_size=(128, 96), heatmap_size=(32, 24), sigma=1.5)
    evaluator = KeypointEvaluator(base.api, flip=False)
    metrics = inference(_Oracle(plain), DataLoader(plain, batch_size=5), evaluator,
                        progress=False)
    assert metrics["AP"] >= 99.0 and metrics["persons"] == len(plain)


def test_megengine_decoding_steps_toward_the_next_maxima():
    from tianyuan.evaluation.keypoint_decode import megengine_preds
    ys, xs = np.mgrid[0:64, 0:48]
    heatmap = np.exp(-((xs - 10.3) ** 2 + (ys - 7.2) ** 2) / 8).astype(np.float32)
    center, scale = np.array([[100.0, 200.0]]), np.array([[96.0, 128.0]])
    coords, scores = megengine_preds(heatmap[None, None], center, scale, input_width=192)
    # peak (10, 7); its 0.35 step stays (MegEngine zeroes a pixel `border` off), 0.15 toward
    # the second maximum (11, 7), 0.05 toward the third (10, 8)
    x, y = 10.15, 7.0
    length = np.hypot(10 - x, 1)
    x, y = x + 0.05 * (10 - x) / length, y + 0.05 / length
    u, v = x + 0.375, y + 0.375                          # ((u + 0.5) * 4 - 0.5) / 4
    np.testing.assert_allclose(coords[0, 0], [100 + (u - 24) * 2, 200 + (v - 32) * 2],
                               atol=1e-4)
    assert scores[0, 0, 0] == pytest.approx(1 + heatmap[7, 10])


def test_megengine_decoding_through_the_evaluator(people):
    base, ann_file = people
    plain = TopDownKeypoints(base, padding=1.1)
    outputs = [b["target"] for b in _batches(plain)]
    metrics, evaluator = _evaluate(plain, ann_file, outputs, decode="megengine")
    assert metrics["AP"] >= 95.0, evaluator.summary
    twice = KeypointEvaluator(ann_file, decode="megengine")
    batch = _batches(plain)[0]
    twice.process(batch, batch["target"])
    twice.process(batch, batch["target"])
    assert len(twice.results()) == 2 * len(batch["image_id"])       # no OKS-NMS
    with pytest.raises(ValueError, match="decode must be one of"):
        KeypointEvaluator(ann_file, decode="udp")
