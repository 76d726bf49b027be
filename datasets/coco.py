"""COCO-format detection and keypoint datasets: COCO, CocoFormat (your own data), Objects365.

Annotations are read through pycocotools. Category ids map to contiguous labels
0..C-1 in sorted-id order; `label_to_category_id` maps back for writing results.
Boxes: COCO's `[x, y, w, h]` become float32 xyxy, clipped to the image; boxes with no
area inside the image are dropped, counted in one warning. The json is checked first
(coco_check.py): non-finite or malformed values are refused naming the annotation.
Crowd regions go to `crowd_boxes` unless `include_crowd`.
Keypoints: (N, K, 3) float32 `x, y, v` in continuous pixel coordinates -- COCO stores
pixel indices, so 0.5 is added to labelled points (v > 0) on load and
`keypoints_to_coco` takes it off again (the convention detectron2 uses).

>>> ds = COCO("coco/val2017", "coco/annotations/instances_val2017.json")  # doctest: +SKIP
>>> item = ds[0]; item["boxes"].shape, item["labels"].dtype                 # doctest: +SKIP
"""
import os
import re
import warnings

import numpy as np

from .base import VisionDataset, require_path
from .coco_check import load_checked

COCO_PERSON_KEYPOINTS = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder",
    "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip",
    "right_hip", "left_knee", "right_knee", "left_ankle", "right_ankle")


# COCO's 19 limbs ("skeleton" in person_keypoints_*.json, there 1-based), as joint index pairs
COCO_LIMBS = ((15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6),
              (5, 7), (6, 8), (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5),
              (4, 6))


def flip_pairs_from_names(names):
    """[(i, j)] for every left_X / right_X pair of keypoint names."""
    index = {name: i for i, name in enumerate(names)}
    return [(i, index["right_" + name[5:]]) for i, name in enumerate(names)
            if name.startswith("left_") and "right_" + name[5:] in index]


COCO_FLIP_PAIRS = flip_pairs_from_names(COCO_PERSON_KEYPOINTS)


def keypoints_to_coco(keypoints):
    """(N, K, 3) continuous-coordinate keypoints -> COCO's pixel-index convention (copy)."""
    out = np.array(keypoints, dtype=np.float32, copy=True)
    out[..., :2] -= 0.5
    return out


class COCO(VisionDataset):
    """COCO-format images with boxes (task="detection") or person keypoints ("keypoints").

    `remove_empty` drops images without annotations left after the filters;
    `min_keypoints` keeps only instances with at least that many labelled keypoints
    (default 1 for the keypoint task); `min_area` drops smaller instances;
    `per_instance` makes one item per instance (top-down keypoint training).
    """

    def __init__(self, root, ann_file, task="detection", transform=None, on_error="raise",
                 include_crowd=False, remove_empty=False, min_area=0.0, min_keypoints=None,
                 per_instance=False, check_files=False, backend="cv2"):
        super().__init__(root, transform, on_error, backend)
        if task not in ("detection", "keypoints"):
            raise ValueError(f"{type(self).__name__}: task must be 'detection' or 'keypoints', "
                             f"got {task!r}")
        owner = type(self).__name__
        require_path(self.root, "the images of " + os.path.basename(os.fspath(ann_file)), owner)
        self.ann_file, self.task = os.fspath(ann_file), task
        self.api = load_checked(self.ann_file, owner)
        self._init_categories()
        self.include_crowd, self.min_area = include_crowd, float(min_area)
        self.min_keypoints = (1 if task == "keypoints" else 0) if min_keypoints is None \
            else int(min_keypoints)
        image_ids = sorted(self.api.imgs)
        if check_files:
            image_ids = self._drop_missing(image_ids)
        self.num_degenerate = 0
        self.records = [self._record(i) for i in image_ids]
        if self.num_degenerate:
            warnings.warn(f"{owner}: {self.ann_file}: {self.num_degenerate} box(es) with no "
                          "area inside their image left out", RuntimeWarning, stacklevel=2)
        if remove_empty:
            self.records = [r for r in self.records if len(r["labels"])]
        self.samples = [(r, None) for r in self.records] if not per_instance else \
            [(r, j) for r in self.records for j in range(len(r["labels"]))]

    def _init_categories(self):
        cats = self.api.cats
        self.category_ids = sorted(cats)
        self.category_id_to_label = {c: i for i, c in enumerate(self.category_ids)}
        self.classes = [cats[c]["name"] for c in self.category_ids]
        names = next((cats[c]["keypoints"] for c in self.category_ids
                      if cats[c].get("keypoints")), None)
        self.keypoint_names = tuple(names) if names else None
        self.flip_pairs = flip_pairs_from_names(names) if names else []
        if self.task == "keypoints" and not names:
            raise ValueError(f"{type(self).__name__}: {self.ann_file} has no category with "
                             "'keypoints' names; expected a person_keypoints json")

    def image_path(self, image):
        return os.path.join(self.root, image["file_name"])

    def _drop_missing(self, image_ids):
        """Keep images found on disk; report the missing ones once, with a count."""
        listing = {}
        kept, missing = [], []
        for image_id in image_ids:
            path = self.image_path(self.api.imgs[image_id])
            folder, name = os.path.split(path)
            if folder not in listing:
                listing[folder] = set(os.listdir(folder)) if os.path.isdir(folder) else set()
            (kept if name in listing[folder] else missing).append(image_id)
        if missing:
            first = self.api.imgs[missing[0]]["file_name"]
            warnings.warn(f"{type(self).__name__}: {len(missing)} of {len(image_ids)} images "
                          f"listed in {self.ann_file} are missing under {self.root} (first: "
                          f"{first}); they are skipped", RuntimeWarning, stacklevel=3)
        self.num_missing = len(missing)
        return kept

    def _keep(self, ann):
        x, y, w, h = ann["bbox"]
        if ann.get("area", w * h) < self.min_area:
            return False
        if self.task == "keypoints":
            return ann.get("num_keypoints", 0) >= self.min_keypoints and not ann.get("iscrowd")
        return True

    def _record(self, image_id):
        image = self.api.imgs[image_id]
        width, height = image["width"], image["height"]
        anns = [a for a in self.api.imgToAnns.get(image_id, []) if self._keep(a)]
        inside = [a for a in anns if _has_area(a["bbox"], width, height)]
        self.num_degenerate += len(anns) - len(inside)
        anns = inside
        crowd = [a for a in anns if a.get("iscrowd") and not self.include_crowd]
        anns = [a for a in anns if not (a.get("iscrowd") and not self.include_crowd)]
        record = {"image": image, "boxes": _xyxy(anns, width, height),
                  "crowd_boxes": _xyxy(crowd, width, height),
                  "labels": np.array([self.category_id_to_label[a["category_id"]] for a in anns],
                                     dtype=np.int64)}
        if self.task == "keypoints":
            record["keypoints"] = _keypoints(anns, len(self.keypoint_names))
        return record

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        record, instance = self.samples[index]
        image = self.load_image(self.image_path(record["image"]))
        if image is None:
            return None
        meta = record["image"]
        pick = slice(None) if instance is None else slice(instance, instance + 1)
        item = {"image": image, "boxes": record["boxes"][pick].copy(),
                "labels": record["labels"][pick].copy(),
                "info": {"index": int(index), "image_id": meta["id"],
                         "file_name": meta["file_name"], "orig_size": image.shape[:2]}}
        if instance is None:
            item["crowd_boxes"] = record["crowd_boxes"].copy()
        if "keypoints" in record:
            item["keypoints"] = record["keypoints"][pick].copy()
        if (meta["height"], meta["width"]) != image.shape[:2]:
            raise ValueError(f"{type(self).__name__}: {meta['file_name']} is "
                             f"{image.shape[1]}x{image.shape[0]} on disk but {meta['width']}x"
                             f"{meta['height']} in {self.ann_file}")
        return self.finish(item)

    def aspect_ratios(self):
        """width / height of every sample, from the annotation file (no decoding)."""
        return [r["image"]["width"] / r["image"]["height"] for r, _ in self.samples]

    def label_to_category_id(self, labels):
        return np.asarray(self.category_ids, dtype=np.int64)[np.asarray(labels, dtype=np.int64)]

    def to_coco_detections(self, image_id, boxes, scores, labels):
        """Result dicts for COCO's loadRes: xyxy boxes -> [x, y, w, h], labels -> category ids."""
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        cats = self.label_to_category_id(labels)
        return [{"image_id": int(image_id), "category_id": int(c), "score": float(s),
                 "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]}
                for b, s, c in zip(boxes, np.asarray(scores).reshape(-1), cats)]


def _has_area(bbox, width, height):
    """Whether an [x, y, w, h] box keeps an area once clipped to the image, in the float32
    it is stored in (a width of 1e-30 does not)."""
    x1, y1 = np.float32(min(max(bbox[0], 0), width)), np.float32(min(max(bbox[1], 0), height))
    x2 = np.float32(min(max(bbox[0] + bbox[2], 0), width))
    y2 = np.float32(min(max(bbox[1] + bbox[3], 0), height))
    return bool(x2 > x1 and y2 > y1)


def _xyxy(anns, width, height):
    """(N, 4) float32 xyxy boxes clipped to the image."""
    if not anns:
        return np.zeros((0, 4), np.float32)
    boxes = np.array([a["bbox"] for a in anns], dtype=np.float64).reshape(-1, 4)
    boxes[:, 2:] += boxes[:, :2]
    boxes[:, 0::2] = boxes[:, 0::2].clip(0, width)
    boxes[:, 1::2] = boxes[:, 1::2].clip(0, height)
    return boxes.astype(np.float32)


def _keypoints(anns, num_keypoints):
    """(N, K, 3) float32; pixel indices of labelled points shifted to pixel centres."""
    points = np.zeros((len(anns), num_keypoints, 3), np.float32)
    for n, ann in enumerate(anns):
        raw = np.asarray(ann.get("keypoints") or [0] * 3 * num_keypoints, np.float32)
        points[n] = raw.reshape(num_keypoints, 3)
    labelled = points[..., 2] > 0
    points[..., :2] += 0.5 * labelled[..., None]
    return points


class CocoFormat(COCO):
    """Your own detection data in COCO format; images the json lists but disk lacks are
    reported once and skipped."""

    def __init__(self, root, ann_file, task="detection", check_files=True, **kwargs):
        super().__init__(root, ann_file, task=task, check_files=check_files, **kwargs)


_PATCH = re.compile(r"(patch\d+)")


class Objects365(COCO):
    """Objects365 v1 or v2 (COCO-format json, 365 classes).

    v2 `file_name`s look like `images/v2/patch16/objects365_v2_00908726.jpg`; the image is
    looked for at root/<file_name>, root/patch16/<name>, then root/<name>. Images the
    annotation lists but the disk lacks are reported once, with a count, and skipped.
    """

    NUM_CLASSES = 365

    def __init__(self, root, ann_file, version=2, **kwargs):
        if version not in (1, 2):
            raise ValueError(f"Objects365: version must be 1 or 2, got {version!r}")
        self.version = version
        self._resolved = {}
        kwargs.setdefault("check_files", True)
        super().__init__(root, ann_file, task="detection", **kwargs)
        if len(self.classes) != self.NUM_CLASSES:
            warnings.warn(f"Objects365: {ann_file} has {len(self.classes)} categories, "
                          f"not {self.NUM_CLASSES}", RuntimeWarning, stacklevel=2)

    def image_path(self, image):
        name = image["file_name"]
        if name in self._resolved:
            return self._resolved[name]
        base = os.path.basename(name)
        patch = _PATCH.search(name) if self.version == 2 else None
        candidates = [os.path.join(self.root, name)]
        if patch:
            candidates.append(os.path.join(self.root, patch.group(1), base))
        candidates.append(os.path.join(self.root, base))
        found = next((c for c in candidates if os.path.isfile(c)), candidates[-1])
        self._resolved[name] = found
        return found
