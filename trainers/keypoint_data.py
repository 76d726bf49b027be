"""Top-down keypoint data for the keypoints task: COCO 2017 person keypoints, your own
COCO-format keypoint data, or generated stick figures (datasets.synthetic_people), as
(train loader, val loader, meta) of TopDownKeypoints person crops.

meta: {"num_joints", "keypoint_names", "flip_pairs", "skeleton" (limbs, 0-based),
"input_size", "heatmap_size", "channels", "sigmas" (OKS constants, None: COCO's),
"ann_file" and "coco" (the validation annotations, a pycocotools COCO)} -- what
KeypointTask gives the model builder, KeypointEvaluator and `tianyuan pose`.

>>> train_loader, val_loader, meta = keypoint_data("people", batch_size=16,
...                                                input_size=(64, 48), heatmap_size=(16, 12))
"""
import os

from tianyuan import distributed as dist
from tianyuan.datasets import (COCO, COCO_LIMBS, COCO_PERSON_KEYPOINTS, BatchSampler, CocoFormat,
                               DataLoader, TopDownKeypoints)
from tianyuan.datasets.synthetic_people import write_coco_people

from . import coco_data
from .coco_data import split_paths, synthetic_root, train_sampler, write_once

KINDS = ("coco", "coco_format", "people")
# each kind's splits relative to data.root (data.train / data.val override them)
LAYOUTS = {
    "coco": {"train": ("train2017", "annotations/person_keypoints_train2017.json"),
             "val": ("val2017", "annotations/person_keypoints_val2017.json")},
    "people": {"train": ("train/images", "train/annotations.json"),
               "val": ("val/images", "val/annotations.json")},
}


def people_coco(root=None, num_train=1000, num_val=100, size=128, seed=0, max_people=3,
                heights=(0.35, 0.75)):
    """`root/{train,val}/images` + `annotations.json` of generated stick figures (written
    once, coco_data.write_once). Without `root` under $TIANYUAN_HOME/synthetic/<settings>."""
    root = synthetic_root(root, f"people_n{num_train}_v{num_val}_s{size}_p{max_people}"
                                f"_h{heights[0]:g}-{heights[1]:g}_seed{seed}")
    extra = {"max_people": max_people, "heights": tuple(heights)}

    def write(folder):
        write_coco_people(os.path.join(folder, "train"), num_train, size, seed, **extra)
        write_coco_people(os.path.join(folder, "val"), num_val, size, seed + 1, **extra)
    return write_once(root, ".people.", write)


def keypoint_dataset(kind, root, split, paths=None, on_error="raise"):
    """The `split` of one of KINDS as a COCO keypoint dataset (before the crops)."""
    if kind not in KINDS:
        raise ValueError(f"keypoint_data: kind must be one of {KINDS}, got {kind!r}")
    images, ann_file = split_paths(LAYOUTS, kind, root, split, paths, "keypoint_data",
                                   "COCO-format keypoint json")
    cls = COCO if kind == "coco" else CocoFormat
    return cls(images, ann_file, task="keypoints", on_error=on_error)


def _loader(dataset, batch_size, num_workers, seed, train):
    """Training: coco_data.train_sampler's order, incomplete batches dropped, each process
    augmenting with draws of its own (seed + rank). Evaluation: coco_data.val_loader."""
    if not train:
        return coco_data.val_loader(dataset, batch_size, num_workers, seed)
    return DataLoader(dataset, batch_sampler=BatchSampler(train_sampler(dataset, seed),
                                                          batch_size, drop_last=True),
                      num_workers=num_workers, seed=seed + dist.rank(),
                      persistent_workers=num_workers > 0)


def _skeleton(base):
    """0-based limbs: the person category's `skeleton` (1-based in COCO files), else COCO's
    for COCO's joint names, else none."""
    for cat in base.api.cats.values():
        if cat.get("keypoints") and cat.get("skeleton"):
            return [(int(a) - 1, int(b) - 1) for a, b in cat["skeleton"]]
    return [tuple(limb) for limb in COCO_LIMBS] \
        if tuple(base.keypoint_names) == COCO_PERSON_KEYPOINTS else []


def keypoint_data(kind, root=None, batch_size=32, val_batch_size=None, num_workers=0,
                  train=None, val=None, input_size=(256, 192), heatmap_size=(64, 48),
                  sigma=2.0, flip=0.5, scale_factor=0.35, rotation=45, rotation_prob=0.6,
                  half_body=(0.3, 8), padding=1.25, person_boxes=None, box_threshold=0.0,
                  channels="RGB", sigmas=None, synthetic=None, on_error="raise", seed=0,
                  splits=("train", "val")):
    """(train loader, val loader, meta) of person crops (TopDownKeypoints); a split not in
    `splits` is None. `batch_size` is per process; `person_boxes`: a COCO detections json
    whose person boxes the validation crops come from (else the ground-truth boxes)."""
    if kind == "people":
        root = people_coco(root, **(synthetic or {}))
    crops = {"input_size": tuple(input_size), "heatmap_size": tuple(heatmap_size),
             "sigma": tuple(sigma) if isinstance(sigma, (list, tuple)) else float(sigma),
             "padding": padding, "channels": channels}
    augment = {"flip": flip, "scale_factor": scale_factor, "rotation": rotation,
               "rotation_prob": rotation_prob,
               "half_body": tuple(half_body) if half_body else None}
    train_loader = val_loader = None
    meta = {}
    if "train" in splits:
        base = keypoint_dataset(kind, root, "train", train, on_error)
        dataset = TopDownKeypoints(base, train=True, **crops, **augment)
        meta = _meta(dataset, base, crops, sigmas)
        train_loader = _loader(dataset, batch_size, num_workers, seed, True)
    if "val" in splits:
        base = keypoint_dataset(kind, root, "val", val, on_error)
        dataset = TopDownKeypoints(base, person_boxes=person_boxes, box_threshold=box_threshold,
                                   **crops)
        if meta and meta["keypoint_names"] != list(dataset.keypoint_names):
            raise ValueError(f"keypoint_data: the train and val jsons name other joints "
                             f"({meta['num_joints']} and {dataset.num_joints})")
        meta = {**_meta(dataset, base, crops, sigmas), "ann_file": base.ann_file,
                "coco": base.api}
        val_loader = _loader(dataset, val_batch_size or batch_size, num_workers, seed, False)
    return train_loader, val_loader, meta


def _meta(dataset, base, crops, sigmas):
    return {"num_joints": dataset.num_joints, "keypoint_names": list(dataset.keypoint_names),
            "flip_pairs": [list(p) for p in dataset.flip_pairs], "skeleton": _skeleton(base),
            "input_size": list(crops["input_size"]), "heatmap_size": list(crops["heatmap_size"]),
            "channels": crops["channels"],
            "sigmas": None if sigmas is None else [float(s) for s in sigmas]}
