"""`tianyuan pose`: skeletons drawn on your photos, and their keypoints as COCO results.

    tianyuan pose model=simplebaseline_res50 weights=simplebaseline_res50.coco_megengine \\
        input=photo.jpg out=poses/ detector=retinanet_resnet50_fpn \\
        detector_weights=retinanet_resnet50_fpn.coco_torchvision
    tianyuan pose model=simplebaseline_small weights=runs/smoke_pose/best.safetensors \\
        input=photos/ out=poses/ boxes=detections/results.json

Top-down: the people's boxes come from `detector` (a zoo detector: its person class, scoring
at least `box_threshold`), else from `boxes` (a COCO detections json -- `tianyuan detect`'s
results.json -- matched to the images by `file_name`, else by `image_id`, the images' order
from 1), else the whole image is one person. Each box becomes a crop of the model's input
size (padded 1.25 times to its aspect, as the data does), the heatmaps (flip-tested) are
decoded into the image's pixels, and the skeleton is drawn (COCO's limbs; a joint's dot grows
with its confidence) into out/<the input's file name>. out/results.json lists COCO keypoint
results ([x, y, confidence] per joint, the score the box's times the mean confidence) with
the image's `file_name`.

The crop size and the joints: `input_size` (height, width), else the training run's
results.json next to the weights, else the model card's.
"""
import json
import os
import sys

import cv2
import numpy as np

import tianyuan as ty
from tianyuan.datasets import decode_image
from tianyuan.datasets.coco import COCO_LIMBS
from tianyuan.datasets.keypoint_geometry import box_to_center_scale, crop_affine
from tianyuan.evaluation.drawing import draw_skeleton
from tianyuan.evaluation.keypoint_decode import as_heatmaps, flip_test, get_final_preds, rescore
from tianyuan.evaluation.report import format_table, write_json
from tianyuan.progress import progress
from tianyuan.weights.preprocessing import IMAGENET_MEAN, IMAGENET_STD

from .commands import build_model
from .config import compose, usage, use_threads
from .detect import detect_image, input_files


def run_info(weights):
    """The training run's results.json next to `weights` ({} when there is none)."""
    path = os.path.join(os.path.dirname(os.path.abspath(str(weights or ""))), "results.json")
    if not weights or not os.path.isfile(path):
        return {}
    with open(path) as handle:
        return json.load(handle)


def read_boxes(path, files):
    """{file path: [([x, y, w, h], score)]} of a COCO detections json for `files`; entries of
    a category other than 1 (person) are left out where they say their category."""
    with open(os.path.expanduser(str(path))) as handle:
        entries = json.load(handle)
    if not isinstance(entries, list):
        raise ValueError(f"pose: boxes={path} must be a list of COCO detections "
                         "({\"image_id\" or \"file_name\", \"bbox\": [x, y, w, h], \"score\"})")
    by_name = {os.path.basename(f): f for f in files}
    out = {f: [] for f in files}
    for entry in entries:
        if entry.get("category_id", 1) != 1 or "bbox" not in entry:
            continue
        name = entry.get("file_name")
        target = by_name.get(os.path.basename(name)) if name else None
        if target is None and not name and 1 <= int(entry.get("image_id", 0)) <= len(files):
            target = files[int(entry["image_id"]) - 1]
        if target is not None:
            out[target].append((list(entry["bbox"]), float(entry.get("score", 1.0))))
    return out


def detector_boxes(detector, path, person_label, threshold):
    """[([x, y, w, h], score)] of the detector's persons in one image."""
    _, found = detect_image(detector, path)
    keep = (found["labels"] == person_label) & (found["scores"] >= threshold)
    return [([x1, y1, x2 - x1, y2 - y1], float(s))
            for (x1, y1, x2, y2), s in zip(found["boxes"][keep].tolist(),
                                           found["scores"][keep].tolist())]


def crops(image, boxes, input_size, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """(N, 3, H, W) normalised RGB crops of `boxes` and their (N, 2) centres and scales."""
    in_h, in_w = input_size
    images, centers, scales = [], [], []
    for bbox, _ in boxes:
        center, scale = box_to_center_scale(bbox, in_w / in_h)
        matrix = crop_affine(center, scale, 0.0, in_w, in_h)
        crop = cv2.warpAffine(image, matrix, (in_w, in_h), flags=cv2.INTER_LINEAR)
        pixels = (crop.astype(np.float32) / 255.0 - np.float32(mean)) / np.float32(std)
        images.append(pixels.transpose(2, 0, 1))
        centers.append(center)
        scales.append(scale)
    return (np.ascontiguousarray(images, np.float32), np.asarray(centers, np.float32),
            np.asarray(scales, np.float32))


def estimate(model, image, boxes, input_size, flip_pairs, flip=True):
    """(N, K, 3) keypoints (x, y at the image's pixels, confidence) of each box's person."""
    if not boxes:
        return np.zeros((0, model.num_joints, 3), np.float32)
    images, centers, scales = crops(image, boxes, input_size)
    forward = lambda x: model(ty.tensor(x))
    with ty.no_grad():
        heatmaps = flip_test(forward, images, flip_pairs) if flip else \
            as_heatmaps(forward(images))
    coords, maxvals = get_final_preds(heatmaps, centers, scales)
    return np.concatenate([coords, maxvals], 2).astype(np.float32)


def _setting(cfg, info, card, key):
    if cfg.get(key) is not None:
        return list(cfg[key])
    if info.get(key) is not None:
        return list(info[key])
    return list(card[key]) if card and card.get(key) is not None else None


def _flip_pairs(info, num_joints):
    if info.get("flip_pairs") is not None:
        return [tuple(p) for p in info["flip_pairs"]]
    if num_joints == 17:
        from tianyuan.datasets.coco import COCO_PERSON_KEYPOINTS, flip_pairs_from_names
        return flip_pairs_from_names(COCO_PERSON_KEYPOINTS)
    raise ValueError(f"pose: a {num_joints}-joint model needs its run's results.json (flip "
                     "pairs) next to the weights, or flip=false")


def _card(model_cfg):
    from .commands import _card as card_of
    return card_of(model_cfg)


def people_boxes(cfg, files):
    """A function path -> [([x, y, w, h], score)]: the detector's, the boxes file's, or the
    whole image."""
    if cfg.get("detector"):
        from omegaconf import OmegaConf
        detector_cfg = OmegaConf.create({"_target_": "tianyuan.zoo.get_model",
                                         "name": cfg.detector})
        detector = build_model(detector_cfg, cfg.detector_weights, command="pose").eval()
        label = int(cfg.person_label if cfg.get("person_label") is not None else
                    (1 if getattr(detector, "num_classes", 0) == 91 else 0))
        return lambda path: detector_boxes(detector, path, label, float(cfg.box_threshold))
    if cfg.get("boxes"):
        given = read_boxes(cfg.boxes, files)
        return lambda path: given[path]

    def whole(path):
        height, width = decode_image(path).shape[:2]
        return [([0.0, 0.0, float(width), float(height)], 1.0)]
    return whole


def run(cfg):
    """Estimate, draw and list; returns a summary dict."""
    use_threads(cfg.num_threads)
    if not cfg.input:
        raise ValueError("pose: give input=photo.jpg or input=folder/")
    if cfg.get("model") is None:
        raise ValueError("pose: give model=NAME (a pose model, e.g. simplebaseline_res50)")
    files = input_files(cfg.input)
    model = build_model(cfg.model, cfg.weights, command="pose").eval()
    info, card = run_info(cfg.weights), _card(cfg.model)
    input_size = _setting(cfg, info, card, "input_size")
    input_size = input_size[-2:] if input_size else [256, 192]
    pairs = _flip_pairs(info, model.num_joints) if cfg.flip else []
    limbs = COCO_LIMBS if model.num_joints == 17 else info.get("skeleton", [])
    boxes_of, out = people_boxes(cfg, files), str(cfg.out)
    os.makedirs(out, exist_ok=True)
    results, people = [], 0
    for number, path in enumerate(progress(files, "pose", unit="image",
                                           disable=not cfg.progress or len(files) == 1)):
        image, boxes = decode_image(path), boxes_of(path)
        points = estimate(model, image, boxes, input_size, pairs, bool(cfg.flip))
        picture = draw_skeleton(image, points, limbs, float(cfg.threshold))
        target = os.path.join(out, os.path.basename(path))
        if not cv2.imwrite(target, cv2.cvtColor(picture, cv2.COLOR_RGB2BGR)):
            raise OSError(f"pose: could not write {target}")
        for (_, score), person in zip(boxes, points):
            results.append({"image_id": number + 1, "file_name": os.path.basename(path),
                            "category_id": 1, "keypoints": [round(float(v), 2) for v in
                                                            person.ravel()],
                            "score": float(rescore(person, score, float(cfg.threshold)))})
        people += len(boxes)
    write_json(os.path.join(out, "results.json"), results)
    summary = {"model": cfg.model.get("name", cfg.model.get("_target_")), "images": len(files),
               "people": people, "input_size": "x".join(map(str, input_size)), "out": out}
    print(format_table([summary], title="\npose"))
    return summary


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(usage("pose", "pose", ("model",)))
        return 0
    run(compose("pose", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
