"""Top-down keypoint samples: one person crop per item, with Gaussian heatmap targets.

`TopDownKeypoints` wraps a keypoint dataset (`COCO(..., task="keypoints")` or
`CocoFormat(..., task="keypoints")`) and makes one sample per person: in training every
non-crowd person with at least one labelled joint; in evaluation the same ground-truth
boxes (what "person boxes from ground truth" means in the papers) or, with
`person_boxes=path`, each person box of a COCO detections file with its score. The box
becomes a centre and a crop window grown to the input's aspect and padded 1.25 times, cut
out with cv2.warpAffine (keypoint_geometry.py: the references' pixel-index convention).

Training augmentation (each draw from the DataLoader's per-sample generator), with the
two references' settings -- the defaults are HRNet's/MMPose's:

| argument | default (HRNet, MMPose) | SimpleBaseline (Xiao et al.) | MSPN (Li et al.) |
|---|---|---|---|
| scale_factor | 0.35: s * clip(1 + N(0, .35), .65, 1.35) | 0.3 | uniform 0.8 * [0.75, 1.25] (*) |
| rotation | 45: clip(N(0, 45), +-90) w.p. 0.6 | 40 | uniform +-45 w.p. 0.5 (*) |
| half_body | (0.3, 8): p 0.3 with > 8 joints | None | (0.3, 3), extent +60% / +80% (*) |
| flip | 0.5 | 0.5 | 0.5 |
| sigma | 2.0 | 2.0 | per stage: blur kernels 15/11/9/7/5, about sigma 2.9/2.3/2.0/1.7/1.1 |

(*) MSPN also extends the box randomly by up to 60 % / 80 % and evaluates with 9 % / 13.5 %
extension instead of the 1.25 padding; those schemes are not reproduced here: its
factors map onto these arguments only approximately. `sigma` as a tuple gives one target
per stage: "target" (S, K, h, w).

Sample: {"image" float32 (3, H, W) (ImageNet mean/std normalised, `channels` order; uint8
without `normalize`), "target" float32 (K, h, w), "target_weight" float32 (K,) (0: joint
unlabelled or its Gaussian wholly off the heatmap), "image_id" int, "center" float32 (2,),
"scale" float32 (2,) (the crop window's w, h in pixels), "score" float (the box's), "area"
float (the crop window's area, for OKS-NMS)}. default_collate stacks them all.

Interface notes (issue 53's brief, as built): `scale` is in pixels, not the references'
units of 200 pixels; the extra keywords are `rotation_prob`, `box_threshold`, `channels`,
`mean`, `std` and `upper_body` (half-body's joint ids, COCO's for 17 joints, else none);
input sides should be multiples of 32 for the zoo's stride-32 backbones (128x96 for smoke
runs, not 64x48).

Bad input is counted, never trained on silently: persons with no labelled joint, boxes
with nothing inside their image, `num_keypoints` disagreeing with the keypoint array (the
array wins) are left out or corrected and reported in one warning and in `self.skipped`.

>>> ds = TopDownKeypoints(COCO("coco/val2017", "coco/annotations/person_keypoints_val2017.json",
...                            task="keypoints"), train=False)          # doctest: +SKIP
>>> ds[0]["target"].shape, ds.num_joints, ds.flip_pairs[0]             # doctest: +SKIP
((17, 64, 48), 17, (1, 2))
"""
import json
import math
import os
import warnings

import cv2
import numpy as np

from tianyuan.weights.preprocessing import IMAGENET_MEAN, IMAGENET_STD

from .keypoint_geometry import (affine_points, box_to_center_scale, clean_box, crop_affine,
                                half_body_box, render_heatmaps)
from .transforms.keypoints import COCO_UPPER_BODY
from .transforms.random import get_rng


def _pair(value, name):
    if len(value) != 2:
        raise ValueError(f"TopDownKeypoints: {name} must be (height, width), got {value!r}")
    return int(value[0]), int(value[1])


class TopDownKeypoints:
    """Person crops of a keypoint dataset with heatmap targets (see the module docstring).
    `input_size` and `heatmap_size` are (height, width); `half_body` (probability, more
    than this many labelled joints) or None; `person_boxes`: a COCO detections json (eval);
    `box_threshold`: detections scoring less are left out."""

    def __init__(self, dataset, input_size=(256, 192), heatmap_size=(64, 48), sigma=2.0,
                 train=False, flip=0.5, scale_factor=0.35, rotation=45, half_body=(0.3, 8),
                 person_boxes=None, aspect_fix=True, padding=1.25, normalize=True,
                 rotation_prob=0.6, box_threshold=0.0, channels="RGB", mean=IMAGENET_MEAN,
                 std=IMAGENET_STD, upper_body=None):
        if getattr(dataset, "task", None) != "keypoints" or not dataset.keypoint_names:
            raise ValueError("TopDownKeypoints: wraps a keypoint dataset: COCO(..., "
                             "task='keypoints') or CocoFormat(..., task='keypoints')")
        if channels not in ("RGB", "BGR"):
            raise ValueError(f"TopDownKeypoints: channels must be 'RGB' or 'BGR', got {channels!r}")
        if train and person_boxes:
            raise ValueError("TopDownKeypoints: person_boxes (a detections file) is for "
                             "evaluation; training crops the ground-truth boxes")
        self.dataset, self.coco, self.train = dataset, dataset.api, bool(train)
        self.input_size = _pair(input_size, "input_size")
        self.heatmap_size = _pair(heatmap_size, "heatmap_size")
        self.sigma, self.flip, self.padding = sigma, float(flip), float(padding)
        self.scale_factor, self.rotation, self.rotation_prob = scale_factor, rotation, rotation_prob
        self.half_body, self.aspect_fix = half_body, aspect_fix
        self.normalize, self.channels = normalize, channels
        self.mean = np.asarray(mean, np.float32) * 255
        self.std = np.asarray(std, np.float32) * 255
        self.keypoint_names = tuple(dataset.keypoint_names)
        self.num_joints = len(self.keypoint_names)
        self.flip_pairs = [tuple(p) for p in dataset.flip_pairs]
        self.upper_body = tuple(upper_body) if upper_body is not None else \
            (COCO_UPPER_BODY if self.num_joints == 17 else ())
        self.person_category_ids = sorted(c for c, cat in self.coco.cats.items()
                                          if len(cat.get("keypoints") or []) == self.num_joints)
        self.skipped = {}
        self._first = {}
        image_ids = [record["image"]["id"] for record in dataset.records]
        self.samples = self._from_detections(person_boxes, image_ids, box_threshold) \
            if person_boxes else self._from_ground_truth(image_ids)
        self._report()

    # ---- samples -------------------------------------------------------------------------

    def _skip(self, reason, what):
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self._first.setdefault(reason, what)

    def _sample(self, image_id, bbox, score, joints=None):
        aspect = self.input_size[1] / self.input_size[0]
        center, scale = box_to_center_scale(bbox, aspect, self.padding, self.aspect_fix)
        return {"image_id": int(image_id), "center": center, "scale": scale,
                "score": float(score), "joints": joints}

    def _from_ground_truth(self, image_ids):
        samples = []
        for image_id in image_ids:
            image = self.coco.imgs[image_id]
            for ann in self.coco.imgToAnns.get(image_id, []):
                if ann["category_id"] not in self.person_category_ids or ann.get("iscrowd"):
                    continue
                joints = self._joints(ann)
                box = clean_box(ann["bbox"], image["width"], image["height"])
                if box is None:
                    self._skip("box_outside_image", f"annotation {ann['id']}")
                elif not (joints[:, 2] > 0).any():
                    self._skip("no_labelled_joints", f"annotation {ann['id']}")
                else:
                    samples.append(self._sample(image_id, box, 1.0, joints))
        return samples

    def _joints(self, ann):
        """(K, 3) float32 x, y, v at COCO's pixel indices; `num_keypoints` checked."""
        raw = ann.get("keypoints") or [0] * (3 * self.num_joints)
        joints = np.asarray(raw, np.float32).reshape(self.num_joints, 3)
        labelled = int((joints[:, 2] > 0).sum())
        stated = ann.get("num_keypoints")
        if stated is not None and stated != labelled:
            self._skip("num_keypoints_mismatch",
                       f"annotation {ann['id']}: num_keypoints {stated}, the array labels "
                       f"{labelled}")
        return joints

    def _from_detections(self, path, image_ids, threshold):
        known = set(image_ids)
        samples = []
        for n, det in enumerate(_read_detections(path)):
            where = f"{path}: detection [{n}]"
            if det.get("category_id", self.person_category_ids[0]) not in \
                    self.person_category_ids or det["score"] < threshold:
                continue
            if det["image_id"] not in known:
                self._skip("detection_of_unknown_image", f"{where} (image {det['image_id']})")
                continue
            image = self.coco.imgs[det["image_id"]]
            if clean_box(det["bbox"], image["width"], image["height"]) is None:
                self._skip("box_outside_image", where)
                continue
            samples.append(self._sample(det["image_id"], det["bbox"], det["score"]))
        return samples

    def _report(self):
        if not self.skipped:
            return
        what = {"no_labelled_joints": "person(s) with no labelled joint left out",
                "box_outside_image": "box(es) with nothing inside their image left out",
                "num_keypoints_mismatch": "annotation(s) whose num_keypoints disagrees with "
                                          "its keypoint array (the array is used)",
                "detection_of_unknown_image": "detection(s) of images the annotation file "
                                              "does not list left out"}
        notes = [f"{count} {what[reason]} (first: {self._first[reason]})"
                 for reason, count in self.skipped.items()]
        warnings.warn(f"TopDownKeypoints: {self.dataset.ann_file}: " + "; ".join(notes),
                      RuntimeWarning, stacklevel=3)

    # ---- items ---------------------------------------------------------------------------

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        sample = self.samples[index]
        meta = self.coco.imgs[sample["image_id"]]
        image = self.dataset.load_image(self.dataset.image_path(meta))
        if image is None:
            return None
        if (meta["height"], meta["width"]) != image.shape[:2]:
            raise ValueError(f"TopDownKeypoints: {meta['file_name']} is {image.shape[1]}x"
                             f"{image.shape[0]} on disk but {meta['width']}x{meta['height']} "
                             f"in {self.dataset.ann_file}")
        center, scale = sample["center"].copy(), sample["scale"].copy()
        joints = sample["joints"]
        joints = np.zeros((self.num_joints, 3), np.float32) if joints is None else joints
        rotation, flip_width = 0.0, None
        if self.train:
            center, scale, rotation, flip_width = self._augment(center, scale, joints,
                                                                image.shape[1])
        in_h, in_w = self.input_size
        matrix = crop_affine(center, scale, rotation, in_w, in_h, flip_width)
        crop = cv2.warpAffine(image, matrix, (in_w, in_h), flags=cv2.INTER_LINEAR)
        target, weight = self._targets(affine_points(matrix, joints[:, :2]),
                                       (joints[:, 2] > 0).astype(np.float32), flip_width)
        return {"image": self._pixels(crop), "target": target, "target_weight": weight,
                "image_id": sample["image_id"], "center": center.astype(np.float32),
                "scale": scale.astype(np.float32), "score": sample["score"],
                "area": float(scale[0] * scale[1])}

    def _augment(self, center, scale, joints, width):
        """Half-body, scale, rotation and flip draws: (center, scale, rotation, flip_width)."""
        rng = get_rng()
        visible = joints[:, 2] > 0
        if self.half_body and self.upper_body and visible.sum() > self.half_body[1] \
                and rng.random() < self.half_body[0]:
            aspect = self.input_size[1] / self.input_size[0]
            box = half_body_box(joints, visible, rng, aspect, self.upper_body)
            if box is not None:
                center, scale = box
        sf, rf = self.scale_factor, self.rotation
        scale = scale * float(np.clip(rng.normal() * sf + 1, 1 - sf, 1 + sf))
        rotation = float(np.clip(rng.normal() * rf, -2 * rf, 2 * rf)) \
            if rng.random() <= self.rotation_prob else 0.0
        if self.flip and rng.random() < self.flip:
            center = np.array([width - 1 - center[0], center[1]], np.float32)
            return center, scale, rotation, width
        return center, scale, rotation, None

    def _targets(self, crop_xy, visible, flipped):
        """"target" (K, h, w) or (S, K, h, w) for a tuple of sigmas, and (K,) weights; a
        mirrored crop swaps each left/right pair's channels."""
        if flipped is not None:
            order = np.arange(self.num_joints)
            for left, right in self.flip_pairs:
                order[left], order[right] = right, left
            crop_xy, visible = crop_xy[order], visible[order]
        in_size, hm_size = self.input_size[::-1], self.heatmap_size[::-1]
        sigmas = self.sigma if isinstance(self.sigma, (list, tuple)) else [self.sigma]
        rendered = [render_heatmaps(crop_xy, visible, in_size, hm_size, float(s))
                    for s in sigmas]
        weight = np.min([w for _, w in rendered], axis=0)
        targets = [t * weight[:, None, None] for t, _ in rendered]
        target = np.stack(targets) if isinstance(self.sigma, (list, tuple)) else targets[0]
        return target, weight.astype(np.float32)

    def _pixels(self, crop):
        """(3, H, W): float32 normalised, or uint8 without `normalize`, in `channels` order."""
        if self.channels == "BGR":
            crop = crop[..., ::-1]
        if not self.normalize:
            return np.ascontiguousarray(crop.transpose(2, 0, 1))
        out = (crop.astype(np.float32) - self.mean) / self.std
        return np.ascontiguousarray(out.transpose(2, 0, 1))


def _read_detections(path):
    """The entries of a COCO detections json, checked: image_id, bbox and score."""
    if not os.path.isfile(os.fspath(path)):
        raise FileNotFoundError(f"TopDownKeypoints: person_boxes={path} not found (a COCO "
                                "detections json such as COCO_val2017_detections_AP_H_56_"
                                "person.json)")
    with open(path) as handle:
        detections = json.load(handle)
    if not isinstance(detections, list):
        raise ValueError(f"TopDownKeypoints: {path}: a detections file is a json list of "
                         "{image_id, category_id, bbox, score}")
    for n, det in enumerate(detections):
        ok = isinstance(det, dict) and isinstance(det.get("image_id"), int) and \
            isinstance(det.get("bbox"), list) and len(det["bbox"]) == 4 and \
            all(isinstance(v, (int, float)) and math.isfinite(v) for v in det["bbox"]) and \
            isinstance(det.get("score"), (int, float)) and math.isfinite(det["score"])
        if not ok:
            raise ValueError(f"TopDownKeypoints: {path}: detection [{n}] needs an integer "
                             f"image_id, a bbox of 4 finite numbers and a finite score; got "
                             f"{str(det)[:120]}")
    return detections
