"""COCO-format json checked before pycocotools indexes it.

Labelling tools and scripts write COCO-format files with NaN or infinite boxes, visibility
-1, `iscrowd: "yes"`, annotations of images the file does not list, an image id twice,
keypoint lists of the wrong length. pycocotools takes all of it; the dataset would then
train on it or fail far away ("cannot reshape array of size 50 into shape (17,3)"). Here a
value no COCO file can hold is refused with the file and the annotation's id; what a file
may hold but a dataset cannot use (an annotation of an unknown image, a second entry for
an image id) is left out and counted in one warning per file.

>>> api = load_checked("annotations/person_keypoints_val2017.json", "COCO")  # doctest: +SKIP
"""
import contextlib
import io
import json
import math
import warnings

from .base import require_path


def load_checked(ann_file, owner):
    """pycocotools' COCO object over the checked contents of `ann_file`."""
    require_path(ann_file, "a COCO-format annotation json", owner)
    try:
        with open(ann_file, "rb") as handle:
            data = json.load(handle)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise ValueError(f"{owner}: {ann_file} is not a readable json "
                         f"({type(error).__name__}: {str(error)[:200]})") from None
    where = f"{owner}: {ann_file}"
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise ValueError(f"{where}: not a COCO-format json (needs an 'images' list)")
    for key in ("annotations", "categories"):
        if not isinstance(data.setdefault(key, []), list):
            raise ValueError(f"{where}: '{key}' must be a list")
    notes = []
    data["images"] = _images(data["images"], where, notes)
    keypoints = _categories(data["categories"], where)
    data["annotations"] = _annotations(data["annotations"], {i["id"] for i in data["images"]},
                                       keypoints, where, notes)
    if notes:
        warnings.warn(f"{where}: " + "; ".join(notes), RuntimeWarning, stacklevel=3)
    from pycocotools.coco import COCO as CocoApi
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        api = CocoApi()
        api.dataset = data
        api.createIndex()
    return api


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(values):
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in values)


def _images(images, where, notes):
    kept, seen, repeated = [], set(), 0
    for n, image in enumerate(images):
        if not isinstance(image, dict) or not _is_int(image.get("id")):
            raise ValueError(f"{where}: images[{n}] needs an integer 'id'")
        name = f"{where}: image {image['id']}"
        for key in ("width", "height"):
            if not _is_int(image.get(key)) or image[key] <= 0:
                raise ValueError(f"{name}: '{key}' must be a positive integer, got "
                                 f"{image.get(key)!r}")
        if not isinstance(image.get("file_name"), str):
            raise ValueError(f"{name}: 'file_name' must be a string")
        if image["id"] in seen:
            repeated += 1
            continue
        seen.add(image["id"])
        kept.append(image)
    if repeated:
        notes.append(f"{repeated} image entr{'y' if repeated == 1 else 'ies'} repeating an "
                     "earlier id left out (the first entry is kept)")
    return kept


def _categories(categories, where):
    """{category id: number of keypoint names (0 without)}."""
    found = {}
    for n, cat in enumerate(categories):
        if not isinstance(cat, dict) or not _is_int(cat.get("id")):
            raise ValueError(f"{where}: categories[{n}] needs an integer 'id'")
        if cat["id"] in found:
            raise ValueError(f"{where}: category id {cat['id']} is listed twice")
        if not isinstance(cat.get("name"), str):
            raise ValueError(f"{where}: category {cat['id']} needs a 'name' string")
        names = cat.get("keypoints") or []
        if not isinstance(names, list) or not all(isinstance(k, str) for k in names):
            raise ValueError(f"{where}: category {cat['id']}: 'keypoints' must be a list of "
                             "names")
        found[cat["id"]] = len(names)
    return found


def _annotations(annotations, image_ids, keypoints, where, notes):
    kept, orphans = [], 0
    for n, ann in enumerate(annotations):
        if not isinstance(ann, dict):
            raise ValueError(f"{where}: annotations[{n}] is not an object")
        name = f"{where}: annotation {str(ann.get('id', f'[{n}]'))[:40]}"
        for key in ("id", "image_id", "category_id"):
            if not _is_int(ann.get(key)):
                raise ValueError(f"{name}: '{key}' must be an integer, got {ann.get(key)!r}")
        if ann["category_id"] not in keypoints:
            raise ValueError(f"{name}: category_id {ann['category_id']} is not among the "
                             "file's categories")
        _check_values(ann, name, keypoints[ann["category_id"]])
        if ann["image_id"] not in image_ids:
            orphans += 1
            continue
        kept.append(ann)
    if orphans:
        notes.append(f"{orphans} annotation(s) of image ids the file does not list left out")
    return kept


def _check_values(ann, name, joints):
    bbox = ann.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4 or not _finite(bbox):
        raise ValueError(f"{name}: 'bbox' must be 4 finite numbers [x, y, w, h], got {bbox!r}")
    if ann.get("iscrowd", 0) not in (0, 1):
        raise ValueError(f"{name}: 'iscrowd' must be 0 or 1, got {ann.get('iscrowd')!r}")
    if "area" in ann and (not _finite([ann["area"]]) or ann["area"] < 0):
        raise ValueError(f"{name}: 'area' must be a finite number >= 0, got {ann['area']!r}")
    points = ann.get("keypoints")
    if points is None:
        return
    if not isinstance(points, list) or not _finite(points):
        raise ValueError(f"{name}: 'keypoints' must be a list of finite numbers")
    if joints and len(points) != 3 * joints:
        raise ValueError(f"{name}: {len(points)} keypoint values, its category names {joints} "
                         f"joints ({3 * joints} values: x, y, v each)")
    if any(v not in (0, 1, 2) for v in points[2::3]):
        raise ValueError(f"{name}: keypoint visibility must be 0, 1 or 2, got "
                         f"{sorted({v for v in points[2::3] if v not in (0, 1, 2)})}")
    if "num_keypoints" in ann and (not _is_int(ann["num_keypoints"]) or
                                   ann["num_keypoints"] < 0):
        raise ValueError(f"{name}: 'num_keypoints' must be an integer >= 0")
