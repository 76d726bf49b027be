"""COCO box AP with pycocotools (`COCOeval(iouType="bbox")`): nothing of AP is computed here.

`COCOEvaluator` follows the Evaluator protocol: `forward` runs a detector on the batch's
images (a list of [0, 1] float CHW arrays: the zoo's detectors resize, normalise and pad
inside) and gets one {"boxes" (K, 4) xyxy in the image's pixels, "scores" (K,), "labels"
(K,)} per image; `process` turns them into COCO result dicts (`bbox` [x, y, w, h],
`category_id`), one record per image, so images with no detection still count;
`evaluate` runs COCOeval over the records' images and returns the numbers in percent
(as top-1 is): AP, AP50, AP75, APs, APm, APl, the six recalls (AR1, AR10, AR100, ARs, ARm,
ARl), and `per_class` AP (pycocotools' precision array, averaged as detectron2 does). A
number pycocotools cannot compute (no ground truth of that size) is NaN.

Labels. A head trained here predicts the data's contiguous labels 0..C-1
(`label_space="contiguous"`: category_ids[label]); torchvision's COCO heads predict 91
classes whose index is the category id (`"coco_ids"`). `"auto"` decides at the first
batch from the model's `num_classes`: C classes are contiguous labels, more classes than
the largest category id are category ids.

>>> evaluator = COCOEvaluator("annotations/instances_val2017.json", category_ids=ds.category_ids,
...                           classes=ds.classes, results_file="runs/x/coco_results.json")
>>> inference(model, val_loader, evaluator)  # {"AP": 36.4, "AP50": ..., "per_class": {...}}
"""
import contextlib
import io
import json
import math
import os
import warnings

import numpy as np

from tianyuan.datasets.coco_check import load_checked
from tianyuan.datasets.transforms.detection import model_images

from .evaluator import Evaluator

LABEL_SPACES = ("auto", "contiguous", "coco_ids")
STATS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")


def _numpy(value):
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def resolve_label_space(label_space, num_classes, category_ids):
    """"contiguous" or "coco_ids" for a model of `num_classes` on data of `category_ids`."""
    if label_space not in LABEL_SPACES:
        raise ValueError(f"COCOEvaluator: label_space must be one of {LABEL_SPACES}, "
                         f"got {label_space!r}")
    if label_space != "auto":
        return label_space
    if num_classes == len(category_ids):
        return "contiguous"
    if num_classes is not None and max(category_ids) < num_classes:
        return "coco_ids"
    raise ValueError(f"COCOEvaluator: the model predicts {num_classes} classes, the data has "
                     f"{len(category_ids)} categories (ids {min(category_ids)}.."
                     f"{max(category_ids)}): neither its labels nor its category ids; give "
                     "task.label_space=contiguous|coco_ids, or a model for this data")


def to_coco_results(image_id, output, label_to_category, scale=None):
    """COCO result dicts of one image's detections {"boxes" xyxy, "scores", "labels"};
    `label_to_category`: label -> category id (None: leave the label out); `scale`: the
    (y, x) factor the image was resized by before the model, taken off again."""
    boxes = _numpy(output["boxes"]).astype(np.float64).reshape(-1, 4)
    scores = _numpy(output["scores"]).astype(np.float64).reshape(-1)
    labels = _numpy(output["labels"]).astype(np.int64).reshape(-1)
    if scale is not None:
        boxes = boxes / np.array([scale[1], scale[0], scale[1], scale[0]])
    results = []
    for box, score, label in zip(boxes.tolist(), scores.tolist(), labels.tolist()):
        category = label_to_category(label)
        if category is None:
            continue
        results.append({"image_id": int(image_id), "category_id": int(category),
                        "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]],
                        "score": score})
    return results


def run_cocoeval(gt, results, image_ids, iou_type, sigmas=None):
    """(COCOeval evaluated, accumulated and summarised over `image_ids`, its summary text) of
    COCO-format `results` against the pycocotools COCO `gt`; `iou_type` "bbox" or "keypoints"
    (`sigmas`: the OKS constants, None: COCO's). pycocotools' own printout is swallowed."""
    from pycocotools.cocoeval import COCOeval
    with contextlib.redirect_stdout(io.StringIO()):
        coco_eval = COCOeval(gt, gt.loadRes([dict(r) for r in results]), iouType=iou_type)
        coco_eval.params.imgIds = image_ids
        if sigmas is not None:
            coco_eval.params.kpt_oks_sigmas = sigmas
        coco_eval.evaluate()
        coco_eval.accumulate()
        summary = io.StringIO()
        with contextlib.redirect_stdout(summary):
            coco_eval.summarize()
    return coco_eval, summary.getvalue().rstrip()


class COCOEvaluator(Evaluator):
    """Box AP of a detector on a COCO-format split (COCO, Objects365, CocoFormat) by
    pycocotools. `ann_file`: the split's annotation json; `category_ids`: the dataset's,
    in label order (default: the json's, sorted); `classes`: names for `per_class`;
    `results_file`: where evaluate() writes the COCO-format results (process 0)."""

    name = "bbox"

    def __init__(self, ann_file, category_ids=None, classes=None, label_space="auto",
                 results_file=None):
        super().__init__()
        self.ann_file, self.results_file = os.fspath(ann_file), results_file
        self._gt = None
        self.category_ids = list(category_ids) if category_ids is not None else \
            sorted(self.gt.cats)
        self.classes = list(classes) if classes is not None else None
        if label_space not in LABEL_SPACES:
            raise ValueError(f"COCOEvaluator: label_space must be one of {LABEL_SPACES}, "
                             f"got {label_space!r}")
        self.label_space = label_space
        self.summary, self.num_unknown = None, 0

    @property
    def gt(self):
        """pycocotools' COCO of the annotation json (read once, checked as the datasets do)."""
        if self._gt is None:
            self._gt = load_checked(self.ann_file, "COCOEvaluator")
        return self._gt

    def reset(self):
        super().reset()
        self.num_unknown = 0

    def forward(self, model, batch):
        if self.label_space == "auto":
            self.label_space = resolve_label_space("auto", getattr(model, "num_classes", None),
                                                   self.category_ids)
        return model(model_images(batch["image"]))

    def _category(self, label):
        if self.label_space == "coco_ids":
            return label if label in self.gt.cats else self._unknown()
        if 0 <= label < len(self.category_ids):
            return self.category_ids[label]
        return self._unknown()

    def _unknown(self):
        self.num_unknown += 1
        return None

    def process(self, batch, outputs):
        if self.label_space == "auto":
            raise ValueError("COCOEvaluator: label_space 'auto' is decided in forward(); "
                             "give contiguous or coco_ids to process outputs of your own")
        for info, output in zip(batch["info"], outputs):
            self.records.append({"image_id": int(info["image_id"]), "detections":
                                 to_coco_results(info["image_id"], output, self._category,
                                                 info.get("scale_factor"))})

    def postfix(self):
        return f"images={len(self.records)}"

    def evaluate(self):
        if not self.records:
            raise ValueError("COCOEvaluator: the loader yielded no images")
        image_ids = sorted({r["image_id"] for r in self.records})
        results = [d for r in self.records for d in r["detections"]]
        if self.results_file:
            _write_results(self.results_file, results)
        if self.num_unknown:
            warnings.warn(f"COCOEvaluator: {self.num_unknown} detections of labels that are "
                          f"no category of {self.ann_file} left out", RuntimeWarning,
                          stacklevel=2)
        counts = {"images": len(image_ids), "detections": len(results)}
        if not results:
            warnings.warn("COCOEvaluator: no detections at all; AP is 0", RuntimeWarning,
                          stacklevel=2)
            return {**{k: 0.0 for k in STATS}, "per_class": {}, **counts}
        coco_eval = self._run(results, image_ids)
        stats = {k: _percent(v) for k, v in zip(STATS, coco_eval.stats)}
        return {**stats, "per_class": self._per_class(coco_eval), **counts}

    def _run(self, results, image_ids):
        """COCOeval over `image_ids`; its printout is kept in `self.summary`."""
        coco_eval, self.summary = run_cocoeval(self.gt, results, image_ids, "bbox")
        return coco_eval

    def _per_class(self, coco_eval):
        """{class name: AP %} from the precision array (IoU, recall, class, area all,
        100 detections), the -1 entries of no ground truth left out (detectron2's)."""
        precision = coco_eval.eval["precision"]          # (T, R, K, A, M)
        names = self.classes or []
        out = {}
        for k, category in enumerate(coco_eval.params.catIds):
            values = precision[:, :, k, 0, -1]
            values = values[values > -1]
            index = self.category_ids.index(category) if category in self.category_ids else -1
            name = names[index] if 0 <= index < len(names) else \
                self.gt.cats[category].get("name", str(category))
            out[name] = float(values.mean() * 100) if values.size else math.nan
        return out


def _percent(value):
    return float(value * 100) if value >= 0 else math.nan


def _write_results(path, results):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(results, handle)
    os.replace(tmp, path)
