"""Stand-in detectors with the zoo detectors' interface, for the detection data, evaluation,
trainer and `tianyuan detect` tests: `model(images, targets=None)`, images a list of (3, H, W)
float32 in [0, 1]; training -> {"loss_cls", "loss_box_reg"}; eval -> [{"boxes" (K, 4) xyxy,
"scores" (K,), "labels" (K,)}] in the image's pixels; `num_classes`.

- TinyDetector: trainable (a strided conv, pooled, a presence logit per class and one box
  per image), tiny and fast; it learns which classes an image holds and where, roughly.
- ReplayDetector: returns the detections of a COCO results file for the image it is given
  (found by its pixels), so an evaluation through a loader reproduces the file exactly.
- FixedDetector: the same boxes for every image.
"""
import json
import os

import cv2
import numpy as np

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn
from tianyuan.datasets import decode_image
from tianyuan.datasets.transforms.detection import model_image

SIDE = 32   # TinyDetector looks at every image resized to SIDE x SIDE


class TinyDetector(nn.Module):
    def __init__(self, num_classes=3, width=8, **unused):
        super().__init__()
        self.num_classes = int(num_classes)
        self.conv = nn.Conv2d(3, width, 3, stride=2, padding=1)
        self.cls = nn.Linear(width, self.num_classes)
        self.box = nn.Linear(width, 4)

    def _features(self, images):
        batch = np.stack([cv2.resize(np.asarray(im, np.float32).transpose(1, 2, 0),
                                     (SIDE, SIDE)).transpose(2, 0, 1) for im in images])
        x = F.relu(self.conv(ty.tensor(batch)))                    # (N, width, 16, 16)
        return F.flatten(F.adaptive_avg_pool2d(x, 1), 1)           # (N, width)

    def forward(self, images, targets=None):
        if self.training and targets is None:
            raise ValueError("TinyDetector: training needs targets")
        features = self._features(images)
        logits, boxes = self.cls(features), F.sigmoid(self.box(features))    # (N, C), (N, 4)
        sizes = [np.array(im.shape[1:], np.float32) for im in images]          # (h, w)
        if self.training:
            return self._losses(logits, boxes, targets, sizes)
        return self._detections(logits.numpy(), boxes.numpy(), sizes)

    def _losses(self, logits, boxes, targets, sizes):
        presence = np.zeros(logits.shape, np.float32)
        goal = np.tile(np.array([0.0, 0.0, 1.0, 1.0], np.float32), (len(targets), 1))
        for i, (target, (h, w)) in enumerate(zip(targets, sizes)):
            presence[i, np.asarray(target["labels"], np.int64)] = 1.0
            if len(target["boxes"]):
                goal[i] = np.asarray(target["boxes"], np.float32)[0] / np.array([w, h, w, h])
        return {"loss_cls": F.binary_cross_entropy_with_logits(logits, ty.tensor(presence)),
                "loss_box_reg": F.l1_loss(boxes, ty.tensor(goal))}

    def _detections(self, logits, boxes, sizes):
        out = []
        for logit, box, (h, w) in zip(logits, boxes, sizes):
            x1, x2 = sorted(box[0::2] * w)
            y1, y2 = sorted(box[1::2] * h)
            k = self.num_classes
            out.append({"boxes": np.tile(np.array([x1, y1, x2, y2], np.float32), (k, 1)),
                        "scores": (1 / (1 + np.exp(-logit))).astype(np.float32),
                        "labels": np.arange(k, dtype=np.int64)})
        return out


def _key(image):
    return np.asarray(image, np.float32).tobytes()


class ReplayDetector(nn.Module):
    """The detections of `results_file` (COCO results: bbox xywh, category_id) for each image
    of `ann_file` under `image_root`, recognised by its pixels. Labels are category ids
    (`num_classes` 91, as torchvision's heads) unless `contiguous`: then the labels are the
    json's sorted category ids' positions and num_classes their count."""

    def __init__(self, ann_file, image_root, results_file, contiguous=False, **unused):
        super().__init__()
        with open(ann_file) as handle:
            gt = json.load(handle)
        with open(results_file) as handle:
            results = json.load(handle)
        ids = sorted(c["id"] for c in gt["categories"])
        self.num_classes = len(ids) if contiguous else 91
        label = {c: (ids.index(c) if contiguous else c) for c in ids}
        by_image = {image["id"]: [] for image in gt["images"]}
        for r in results:
            by_image.setdefault(r["image_id"], []).append(r)
        self.table = {}
        for image in gt["images"]:
            pixels = model_image(decode_image(os.path.join(image_root, image["file_name"])))
            rows = by_image[image["id"]]
            boxes = np.array([r["bbox"] for r in rows], np.float64).reshape(-1, 4)
            boxes[:, 2:] += boxes[:, :2]
            self.table[_key(pixels)] = {
                "boxes": boxes, "scores": np.array([r["score"] for r in rows], np.float64),
                "labels": np.array([label[r["category_id"]] for r in rows], np.int64)}

    def forward(self, images, targets=None):
        return [self.table[_key(image)] for image in images]


class FixedDetector(nn.Module):
    """`boxes` (K, 4) with `scores` and `labels` for every image."""

    def __init__(self, boxes, scores, labels, num_classes=91, **unused):
        super().__init__()
        self.num_classes = num_classes
        self.output = {"boxes": np.asarray(boxes, np.float32),
                       "scores": np.asarray(scores, np.float32),
                       "labels": np.asarray(labels, np.int64)}

    def forward(self, images, targets=None):
        return [dict(self.output) for _ in images]
