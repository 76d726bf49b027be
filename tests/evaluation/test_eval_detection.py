"""COCOEvaluator is pycocotools: a detections file replayed through the data loader and the
evaluator (and through `tianyuan eval`) gives COCOeval's own numbers; labels as category ids
or contiguous; Objects365 v1 and v2 jsons (in their real layouts) load and evaluate; the
records of several processes evaluate as one."""
import contextlib
import io
import json
import math

import numpy as np
import pytest
from det_standins import FixedDetector, ReplayDetector
from pycocotools.coco import COCO as CocoApi
from pycocotools.cocoeval import COCOeval

from tianyuan.evaluation import inference
from tianyuan.evaluation.detection import STATS, COCOEvaluator, resolve_label_space
from tianyuan.trainers import cli
from tianyuan.trainers.detection import detection_data

# gaps in the ids, as COCO's; names in another order than the ids
CATEGORIES = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 18, "name": "dog"}]


def _write_image(path, seed, height, width):
    import cv2
    rng = np.random.default_rng(seed)   # distinct pixels: ReplayDetector tells images apart
    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), image)


def _box(rng, height, width):
    x, y = rng.uniform(0, width * 0.6), rng.uniform(0, height * 0.6)
    return [x, y, rng.uniform(4, width - x), rng.uniform(4, height - y)]


def write_coco_folder(root, num_images=6, seed=0, file_name="{:06d}.png", categories=CATEGORIES,
                      extra_ann=None):
    """root/images/*.png + root/ann.json (boxes of every category, a crowd box, an empty
    image) and root/dets.json: jittered copies of the truth plus false positives."""
    rng = np.random.default_rng(seed)
    images, anns, dets = [], [], []
    ids = [c["id"] for c in categories]
    for i in range(1, num_images + 1):
        height, width = int(rng.integers(60, 120)), int(rng.integers(60, 120))
        name = file_name.format(i)
        _write_image(root / "images" / name, seed * 100 + i, height, width)
        images.append({"id": i, "file_name": name, "height": height, "width": width})
        for k in range(0 if i == num_images else int(rng.integers(1, 5))):   # last: no boxes
            bbox, category = _box(rng, height, width), int(rng.choice(ids))
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": category,
                         "bbox": bbox, "area": bbox[2] * bbox[3], "iscrowd": int(k == 3),
                         **(extra_ann or {})})
            jitter = np.array(bbox) + rng.normal(0, 3, 4) * [1, 1, 0.5, 0.5]
            dets.append({"image_id": i, "category_id": category, "bbox": jitter.tolist(),
                         "score": float(rng.uniform(0.3, 1))})
        for _ in range(int(rng.integers(0, 3))):
            dets.append({"image_id": i, "category_id": int(rng.choice(ids)),
                         "bbox": _box(rng, height, width), "score": float(rng.uniform(0, 0.6))})
    with open(root / "ann.json", "w") as handle:
        json.dump({"images": images, "annotations": anns, "categories": categories}, handle)
    with open(root / "dets.json", "w") as handle:
        json.dump(dets, handle)
    return root / "ann.json", root / "dets.json"


def pycocotools_stats(ann_file, dets_file):
    with contextlib.redirect_stdout(io.StringIO()):
        gt = CocoApi(str(ann_file))
        coco_eval = COCOeval(gt, gt.loadRes(str(dets_file)), iouType="bbox")
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return {k: v * 100 if v >= 0 else math.nan for k, v in zip(STATS, coco_eval.stats)}


def assert_same_stats(ours, theirs):
    for key in STATS:
        np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-9, atol=1e-9, err_msg=key)


def _val_loader(root, ann_file, kind="coco_format", **kwargs):
    _, loader, meta = detection_data(kind, str(root), val_batch_size=4, splits=("val",),
                                     val={"images": "images", "ann_file": str(ann_file)},
                                     **kwargs)
    return loader, meta


@pytest.mark.parametrize("contiguous", [False, True])
def test_replayed_detections_give_pycocotools_numbers(tmp_path, contiguous):
    ann_file, dets_file = write_coco_folder(tmp_path)
    loader, meta = _val_loader(tmp_path, ann_file)
    model = ReplayDetector(ann_file, tmp_path / "images", dets_file, contiguous=contiguous)
    evaluator = COCOEvaluator(ann_file, meta["category_ids"], meta["classes"],
                              results_file=str(tmp_path / "out" / "results.json"))
    result = inference(model, loader, evaluator, progress=False)
    assert evaluator.label_space == ("contiguous" if contiguous else "coco_ids")
    assert_same_stats(result, pycocotools_stats(ann_file, dets_file))
    assert 0 < result["AP"] < 100 and result["images"] == 6
    assert result["detections"] == len(json.load(open(dets_file)))
    assert set(result["per_class"]) == {"person", "car", "dog"}
    assert "Average Precision  (AP) @[ IoU=0.50:0.95" in evaluator.summary
    # the results file is the detections file again (as COCO result dicts)
    written = json.load(open(tmp_path / "out" / "results.json"))
    assert pycocotools_stats(ann_file, tmp_path / "out" / "results.json") == \
        pytest.approx(pycocotools_stats(ann_file, dets_file), nan_ok=True)
    assert {(r["image_id"], r["category_id"]) for r in written} == \
        {(r["image_id"], r["category_id"]) for r in json.load(open(dets_file))}


def test_tianyuan_eval_prints_the_coco_table_and_writes_json(tmp_path, capsys):
    ann_file, dets_file = write_coco_folder(tmp_path, seed=1)
    out = tmp_path / "eval.json"
    status = cli.main(["eval", "data=coco_format", f"data.root={tmp_path}",
                       "data.val.images=images", "data.val.ann_file=ann.json",
                       "model._target_=det_standins.ReplayDetector", f"+model.ann_file={ann_file}",
                       f"+model.image_root={tmp_path / 'images'}",
                       f"+model.results_file={dets_file}", f"out={out}", "progress=false",
                       "data.num_workers=0"])
    assert status == 0
    printed = capsys.readouterr().out
    assert "Average Precision  (AP) @[ IoU=0.50      | area=   all | maxDets=100 ]" in printed
    assert "AP50" in printed and "eval_coco_results.json" in printed
    result = json.load(open(out))
    assert_same_stats(result, pycocotools_stats(ann_file, dets_file))
    assert result["classes"] == 3 and set(result["per_class"]) == {"person", "car", "dog"}
    assert pycocotools_stats(ann_file, tmp_path / "eval_coco_results.json") == \
        pytest.approx(pycocotools_stats(ann_file, dets_file), nan_ok=True)


def _objects365_categories():
    names = ["Person", "Sneakers", "Chair"] + [f"class {k}" for k in range(4, 366)]
    return [{"id": k + 1, "name": name} for k, name in enumerate(names)]


@pytest.mark.parametrize("version", [1, 2])
def test_objects365_v1_and_v2_load_and_evaluate(tmp_path, version):
    # v1: flat "obj365_val_<12 digits>.jpg" in val/; v2: "images/v2/patchN/objects365_v2_...jpg"
    # in the json, the files under val/patchN/; v2 annotations carry isfake/isreflected
    pattern = "obj365_val_{:012d}.jpg" if version == 1 else "patch0/objects365_v2_{:08d}.jpg"
    extra = {} if version == 1 else {"isfake": 0, "isreflected": 0}
    root = tmp_path / "objects365"
    ann_file, dets_file = write_coco_folder(root, num_images=4, seed=2, file_name=pattern,
                                            categories=_objects365_categories(), extra_ann=extra)
    (root / "images").rename(root / "val")
    data = json.load(open(ann_file))
    model = ReplayDetector(ann_file, root / "val", dets_file, contiguous=True)
    if version == 2:
        for image in data["images"]:
            image["file_name"] = "images/v2/" + image["file_name"]
    name = "objects365_val.json" if version == 1 else "zhiyuan_objv2_val.json"
    json.dump(data, open(root / name, "w"))
    _, loader, meta = detection_data("objects365", str(root), val_batch_size=2, version=version,
                                     splits=("val",))      # the version's own file names
    assert len(meta["classes"]) == 365 and meta["classes"][:2] == ["Person", "Sneakers"]
    assert sum(len(b["image"]) for b in loader) == 4
    result = inference(model, loader, COCOEvaluator(meta["ann_file"], meta["category_ids"],
                                                    meta["classes"]), progress=False)
    assert_same_stats(result, pycocotools_stats(root / name, dets_file))
    assert len(result["per_class"]) == 365 and result["AP50"] > 0


def test_records_of_several_processes_evaluate_as_one(tmp_path):
    ann_file, dets_file = write_coco_folder(tmp_path, seed=3)
    loader, meta = _val_loader(tmp_path, ann_file)
    model = ReplayDetector(ann_file, tmp_path / "images", dets_file)
    whole = COCOEvaluator(ann_file, meta["category_ids"])
    expected = inference(model, loader, whole, progress=False)
    merged = COCOEvaluator(ann_file, meta["category_ids"], label_space="coco_ids")
    merged.records = list(reversed(whole.records))        # another process's share first
    result = merged.evaluate()
    assert_same_stats(result, expected)
    assert json.loads(json.dumps(whole.records)) == whole.records    # JSON-able, as gathered


def test_label_spaces_and_what_fits_no_category(tmp_path):
    ann_file, _ = write_coco_folder(tmp_path, num_images=2, seed=4)
    ids = [1, 3, 18]
    assert resolve_label_space("auto", 3, ids) == "contiguous"
    assert resolve_label_space("auto", 91, ids) == "coco_ids"
    with pytest.raises(ValueError, match="predicts 10 classes.*task.label_space"):
        resolve_label_space("auto", 10, ids)
    with pytest.raises(ValueError, match="label_space must be one of"):
        COCOEvaluator(ann_file, label_space="ids")
    loader, meta = _val_loader(tmp_path, ann_file)
    # a COCO-id head predicting id 2 (no category here) and the background 0: left out, counted
    model = FixedDetector([[1, 1, 20, 20]] * 3, [0.9, 0.8, 0.7], [2, 0, 3])
    evaluator = COCOEvaluator(ann_file, meta["category_ids"])
    with pytest.warns(RuntimeWarning, match="4 detections of labels that are no category"):
        result = inference(model, loader, evaluator, progress=False)   # 2 images x 2
    assert result["detections"] == 2 and evaluator.num_unknown == 4


def test_no_detections_at_all_is_zero_ap(tmp_path):
    ann_file, _ = write_coco_folder(tmp_path, num_images=2, seed=5)
    loader, meta = _val_loader(tmp_path, ann_file)
    model = FixedDetector(np.zeros((0, 4)), [], [], num_classes=3)
    with pytest.warns(RuntimeWarning, match="no detections at all"):
        result = inference(model, loader, COCOEvaluator(ann_file), progress=False)
    assert result["AP"] == 0.0 and result["images"] == 2 and result["detections"] == 0


def test_two_processes_each_score_their_share_and_process_0_evaluates(tmp_path, monkeypatch):
    import os
    from helpers import mpi_run
    ann_file, dets_file = write_coco_folder(tmp_path, num_images=7, seed=6)
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.setenv("PYTHONPATH", tests + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "eval.json"
    mpi_run(2, ["-m", "tianyuan.trainers.cli", "eval", "data=coco_format",
                f"data.root={tmp_path}", "data.val.images=images", "data.val.ann_file=ann.json",
                "model._target_=det_standins.ReplayDetector", f"+model.ann_file={ann_file}",
                f"+model.image_root={tmp_path / 'images'}", f"+model.results_file={dets_file}",
                f"out={out}", "progress=false", "data.num_workers=0", "data.val_batch_size=2"])
    result = json.load(open(out))
    assert result["processes"] == 2 and result["images"] == 7
    assert_same_stats(result, pycocotools_stats(ann_file, dets_file))
