"""COCO keypoint AP with pycocotools (`COCOeval(iouType="keypoints")`): OKS AP is never
computed here.

`KeypointEvaluator` follows the Evaluator protocol over batches of TopDownKeypoints
samples (one person crop each: "image", "center", "scale", "score", "area", "image_id"):
`forward` runs the model with the flip test; `process` decodes the heatmaps into image
coordinates (keypoint_decode.py) and keeps one JSON-able record per person; `evaluate`
rescores each person (box score x mean joint confidence above 0.2), applies OKS-NMS (0.9)
per image, writes the COCO keypoint results file and runs COCOeval over every image of
the annotation file (as the references do: an image whose persons were all missed still
counts). Numbers in percent, as the other evaluators': AP, AP50, AP75, APm, APl, AR,
AR50, AR75, ARm, ARl.

Data of other than COCO's 17 joints needs its OKS `sigmas` (one per joint). Ground truth
whose `num_keypoints` disagrees with its keypoint array is corrected to the array's count
(COCOeval ignores persons by num_keypoints), and a missing `area` is the box's; both are
counted in one warning.

>>> evaluator = KeypointEvaluator("annotations/person_keypoints_val2017.json",
...                               results_file="runs/x/keypoint_results.json")
>>> inference(model, val_loader, evaluator)            # {"AP": 70.4, "AP50": ..., ...}
"""
import os
import warnings

import numpy as np

import tianyuan as ty
from tianyuan.datasets.coco import flip_pairs_from_names
from tianyuan.datasets.coco_check import load_checked

from .detection import _percent, _write_results, run_cocoeval
from .evaluator import Evaluator
from .keypoint_decode import (COCO_SIGMAS, as_heatmaps, flip_back, flip_test, get_final_preds,
                              get_max_preds, megengine_preds, oks_iou, oks_nms, rescore)

DECODERS = ("xiao", "megengine")

STATS = ("AP", "AP50", "AP75", "APm", "APl", "AR", "AR50", "AR75", "ARm", "ARl")

__all__ = ["COCO_SIGMAS", "DECODERS", "KeypointEvaluator", "STATS", "check_num_joints",
           "flip_back", "flip_test", "get_final_preds", "get_max_preds", "megengine_preds",
           "oks_iou", "oks_nms", "rescore"]


def check_num_joints(model_joints, data_joints, where):
    """A clear error when a model's joint count is not the data's."""
    if int(model_joints) != int(data_joints):
        raise ValueError(f"{where} names {data_joints} joints but the model predicts "
                         f"{model_joints}: give a model of {data_joints} joints (num_joints="
                         f"{data_joints}) or keypoint data of {model_joints}")


def _person_category(gt, where):
    cats = [c for c in sorted(gt.cats) if gt.cats[c].get("keypoints")]
    if not cats:
        raise ValueError(f"{where} has no category with 'keypoints' names; expected a "
                         "person_keypoints json")
    return cats[0], list(gt.cats[cats[0]]["keypoints"])


def _repair_ground_truth(gt, where):
    """num_keypoints from the keypoint arrays and missing areas from the boxes (counted)."""
    mismatched, no_area, first = 0, 0, None
    for ann in gt.anns.values():
        points = ann.get("keypoints")
        if points:
            labelled = int(sum(1 for v in points[2::3] if v > 0))
            if ann.get("num_keypoints", labelled) != labelled:
                mismatched += 1
                first = first or f"annotation {ann['id']} says {ann['num_keypoints']}, its " \
                                 f"array labels {labelled}"
            ann["num_keypoints"] = labelled
        if "area" not in ann:
            no_area += 1
            ann["area"] = float(ann["bbox"][2] * ann["bbox"][3])
    notes = []
    if mismatched:
        notes.append(f"{mismatched} num_keypoints disagreeing with the keypoint array set to "
                     f"the array's count (first: {first})")
    if no_area:
        notes.append(f"{no_area} annotation(s) without 'area' given their box's")
    if notes:
        warnings.warn(f"KeypointEvaluator: {where}: " + "; ".join(notes), RuntimeWarning,
                      stacklevel=3)


class KeypointEvaluator(Evaluator):
    """Keypoint AP of a top-down pose model by pycocotools. `coco_gt`: the annotation json's
    path or a pycocotools COCO (a dataset's `coco`); `flip_pairs`: default from the joint
    names; `flip`: run the flip test in `forward`; `in_vis_thre` and `oks_thre`: the
    rescoring and OKS-NMS thresholds; `sigmas`: OKS constants (COCO's for 17 joints);
    `image_ids`: "all" images of the file (the references') or "records" (those seen);
    `results_file`: where evaluate() writes the COCO keypoint results. `decode`: "xiao"
    (Xiao et al.'s, above) or "megengine" (MegEngine Models' test.py, for its published
    .pkl numbers: blurred peaks moved toward the next maxima, no flip shift, score = mean
    joint score x box score, no OKS-NMS; give its crops data.padding=1.1)."""

    name = "keypoints"

    def __init__(self, coco_gt, flip_pairs=None, flip=True, shift_heatmap=True,
                 in_vis_thre=0.2, oks_thre=0.9, sigmas=None, results_file=None,
                 image_ids="all", post_process=True, decode="xiao"):
        super().__init__()
        if decode not in DECODERS:
            raise ValueError(f"KeypointEvaluator: decode must be one of {DECODERS}, "
                             f"got {decode!r}")
        self.decode = decode
        is_path = isinstance(coco_gt, (str, os.PathLike))
        self.where = os.fspath(coco_gt) if is_path else "the ground truth"
        self.gt = load_checked(os.fspath(coco_gt), "KeypointEvaluator") if is_path else coco_gt
        self.category_id, names = _person_category(self.gt, self.where)
        self.num_joints = len(names)
        self.flip_pairs = [tuple(p) for p in (flip_pairs if flip_pairs is not None
                                              else flip_pairs_from_names(names))]
        if sigmas is None and self.num_joints != len(COCO_SIGMAS):
            raise ValueError(f"KeypointEvaluator: {self.where} names {self.num_joints} joints; "
                             f"COCO's OKS sigmas are for 17: give sigmas (one per joint, e.g. "
                             f"data.sigmas=[0.05, ...])")
        self.sigmas = COCO_SIGMAS if sigmas is None else np.asarray(sigmas, np.float64)
        if len(self.sigmas) != self.num_joints:
            raise ValueError(f"KeypointEvaluator: {len(self.sigmas)} sigmas for "
                             f"{self.num_joints} joints")
        if image_ids not in ("all", "records"):
            raise ValueError(f"KeypointEvaluator: image_ids must be 'all' or 'records', "
                             f"got {image_ids!r}")
        self.flip, self.shift_heatmap, self.post_process = flip, shift_heatmap, post_process
        self.in_vis_thre, self.oks_thre = in_vis_thre, oks_thre
        self.results_file, self.image_ids = results_file, image_ids
        self.summary = None
        _repair_ground_truth(self.gt, self.where)

    def forward(self, model, batch):
        """Heatmaps (N, K, h, w) of batch["image"], flip-tested unless `flip` is off."""
        run = lambda images: model(ty.tensor(images))
        if self.flip:
            shift = self.shift_heatmap and self.decode == "xiao"
            return flip_test(run, batch["image"], self.flip_pairs, shift)
        return as_heatmaps(run(np.asarray(batch["image"])))

    def process(self, batch, outputs):
        heatmaps = as_heatmaps(outputs)
        check_num_joints(heatmaps.shape[1], self.num_joints, f"KeypointEvaluator: {self.where}")
        if self.decode == "megengine":
            coords, maxvals = megengine_preds(heatmaps, batch["center"], batch["scale"],
                                              np.shape(batch["image"])[-1])
        else:
            coords, maxvals = get_final_preds(heatmaps, batch["center"], batch["scale"],
                                              self.post_process)
        points = np.concatenate([coords, maxvals], 2).astype(np.float64)     # (N, K, 3)
        for n, image_id in enumerate(np.asarray(batch["image_id"]).tolist()):
            self.records.append({"image_id": int(image_id),
                                 "keypoints": [round(v, 3) for v in points[n].ravel().tolist()],
                                 "score": float(np.asarray(batch["score"])[n]),
                                 "area": float(np.asarray(batch["area"])[n])})

    def postfix(self):
        return f"persons={len(self.records)}"

    def results(self):
        """COCO keypoint result dicts: rescored, OKS-NMS'd per image."""
        by_image = {}
        for record in self.records:
            by_image.setdefault(record["image_id"], []).append(record)
        out = []
        for image_id in sorted(by_image):
            people = by_image[image_id]
            points = np.array([p["keypoints"] for p in people]).reshape(len(people), -1, 3)
            if self.decode == "megengine":
                scores = [float(k[:, 2].mean()) * p["score"] for k, p in zip(points, people)]
                keep = range(len(people))
            else:
                scores = [rescore(k, p["score"], self.in_vis_thre)
                          for k, p in zip(points, people)]
                keep = oks_nms(points, scores, [p["area"] for p in people], self.oks_thre,
                               self.sigmas)
            out += [{"image_id": image_id, "category_id": self.category_id,
                     "keypoints": people[i]["keypoints"], "score": scores[i]} for i in keep]
        return out

    def evaluate(self):
        if not self.records:
            raise ValueError("KeypointEvaluator: the loader yielded no person crops")
        results = self.results()
        if self.results_file:
            _write_results(self.results_file, results)
        image_ids = sorted(self.gt.getImgIds()) if self.image_ids == "all" else \
            sorted({r["image_id"] for r in self.records})
        counts = {"persons": len(self.records), "kept": len(results),
                  "images": len(image_ids)}
        if not results:
            warnings.warn("KeypointEvaluator: no keypoints at all; AP is 0", RuntimeWarning,
                          stacklevel=2)
            return {**{k: 0.0 for k in STATS}, **counts}
        coco_eval = self._run(results, image_ids)
        return {**{k: _percent(v) for k, v in zip(STATS, coco_eval.stats)}, **counts}

    def _run(self, results, image_ids):
        """COCOeval (OKS) over `image_ids`; its printout is kept in `self.summary`."""
        coco_eval, self.summary = run_cocoeval(self.gt, results, image_ids, "keypoints",
                                               self.sigmas)
        return coco_eval

