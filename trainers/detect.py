"""`tianyuan detect`: a detector's boxes drawn on your photos, and a COCO-format results file.

    tianyuan detect model=retinanet_resnet50_fpn weights=retinanet_resnet50_fpn.coco \\
        input=photo.jpg out=detections/
    tianyuan detect model=retinanet_resnet50_fpn weights=runs/mine/best.safetensors \\
        input=photos/ out=detections/ --threshold 0.3

For each image (a file, or every image directly in a folder) the model runs in eval mode
on the unresized picture (it resizes inside); detections scoring at least `threshold` are
drawn with OpenCV (a box, its class name and score, a colour per class) into
out/<the input's file name>, and listed in out/results.json: COCO result dicts (`bbox`
[x, y, w, h] in the image's pixels, `score`, `category_id`) with the image's `file_name`
and `category_name`.

Class names: `classes=` (a list, or a COCO-format json whose categories the model was
trained on); else the `results.json` a training run wrote next to the weights; else COCO's
for a 91-class head (torchvision's published weights: label = category id); else "class k".
"""
import json
import os
import sys

import cv2
import numpy as np

import tianyuan as ty
from tianyuan.datasets import decode_image
from tianyuan.datasets.coco_categories import coco91_names
from tianyuan.datasets.transforms.detection import model_image
from tianyuan.evaluation.drawing import box_colour, draw_detections  # noqa: F401 (detect.*)
from tianyuan.evaluation.drawing import class_name as _name
from tianyuan.evaluation.image_files import IMAGE_EXTENSIONS
from tianyuan.evaluation.report import format_table, write_json
from tianyuan.progress import progress

from .commands import build_model
from .config import compose, usage, use_threads


def input_files(path):
    """[path] for a file; the images directly in a folder, sorted."""
    path = os.path.expanduser(str(path))
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"detect: input={path} is neither an image file nor a folder")
    files = sorted(os.path.join(path, n) for n in os.listdir(path)
                   if n.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS)
    if not files:
        raise ValueError(f"detect: no images ({', '.join(IMAGE_EXTENSIONS)}) in {path}")
    return files


def class_names(classes, weights, num_classes):
    """(names in label order, category ids in label order or None: the label is the id)."""
    if isinstance(classes, str) and classes.endswith(".json"):
        with open(os.path.expanduser(classes)) as handle:
            categories = sorted(json.load(handle)["categories"], key=lambda c: c["id"])
        return [c["name"] for c in categories], [c["id"] for c in categories]
    if classes:
        return [str(c) for c in classes], None
    run = os.path.join(os.path.dirname(os.path.abspath(str(weights or ""))), "results.json")
    if weights and os.path.isfile(run):
        with open(run) as handle:
            saved = json.load(handle)
        if saved.get("classes"):
            return list(saved["classes"]), saved.get("category_ids")
    if num_classes == 91:
        return coco91_names(), None
    return [f"class {k}" for k in range(int(num_classes or 0))], None


def _threshold_argument(argv):
    """`--threshold 0.3` / `--threshold=0.3` as the hydra override threshold=0.3."""
    out, items = [], iter(argv)
    for item in items:
        if item == "--threshold":
            out.append(f"threshold={next(items, '')}")
        elif item.startswith("--threshold="):
            out.append("threshold=" + item.split("=", 1)[1])
        else:
            out.append(item)
    return out


def detect_image(model, path):
    """(image (H, W, 3) uint8 RGB, {"boxes", "scores", "labels"} numpy) of one file."""
    image = decode_image(path)
    with ty.no_grad():
        output = model([model_image(image)])[0]
    return image, {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                   for k, v in output.items()}


def run(cfg):
    """Detect, draw and list; returns a summary dict."""
    use_threads(cfg.num_threads)
    if not cfg.input:
        raise ValueError("detect: give input=photo.jpg or input=folder/")
    if cfg.get("model") is None:
        raise ValueError("detect: give model=NAME (a detector, e.g. retinanet_resnet50_fpn)")
    files = input_files(cfg.input)
    model = build_model(cfg.model, cfg.weights, command="detect").eval()
    names, category_ids = class_names(cfg.classes, cfg.weights,
                                      getattr(model, "num_classes", None))
    threshold, out = float(cfg.threshold), str(cfg.out)
    os.makedirs(out, exist_ok=True)
    results, drawn = [], 0
    for number, path in enumerate(progress(files, "detect", unit="image",
                                           disable=not cfg.progress or len(files) == 1)):
        image, found = detect_image(model, path)
        keep = found["scores"] >= threshold
        boxes, scores, labels = found["boxes"][keep], found["scores"][keep], found["labels"][keep]
        picture = draw_detections(image, boxes, scores, labels, names, int(cfg.line_width))
        target = os.path.join(out, os.path.basename(path))
        if not cv2.imwrite(target, cv2.cvtColor(picture, cv2.COLOR_RGB2BGR)):
            raise OSError(f"detect: could not write {target}")
        results += _results(number + 1, os.path.basename(path), boxes, scores, labels, names,
                            category_ids)
        drawn += int(keep.sum())
    write_json(os.path.join(out, "results.json"), results)
    summary = {"model": cfg.model.get("name", cfg.model.get("_target_")), "images": len(files),
               "detections": drawn, "threshold": threshold, "out": out}
    print(format_table([summary], title="\ndetect"))
    return summary


def _results(image_id, file_name, boxes, scores, labels, names, category_ids):
    rows = []
    for box, score, label in zip(boxes.tolist(), scores.tolist(), labels.tolist()):
        category = category_ids[label] if category_ids and 0 <= label < len(category_ids) \
            else label
        rows.append({"image_id": image_id, "file_name": file_name, "category_id": int(category),
                     "category_name": _name(names, int(label)), "score": float(score),
                     "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]]})
    return rows


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(usage("detect", "detect", ("model",)))
        return 0
    run(compose("detect", _threshold_argument(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
