"""Writers of tiny datasets in their real on-disk formats, for the dataset tests."""
import json
import os
import pickle
import struct
import tarfile
import zlib

import cv2
import numpy as np


def write_image(path, height=8, width=8, colour=(200, 30, 60), ext=None):
    """An RGB image of one colour, written with OpenCV (JPEG or PNG by extension)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image = np.zeros((height, width, 3), np.uint8)
    image[:] = colour
    assert cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    return image


def truncate(path, keep=0.5):
    data = open(path, "rb").read()
    open(path, "wb").write(data[:max(4, int(len(data) * keep))])


# ---- ImageNet -------------------------------------------------------------------------------

def write_imagenet_train(root, wnids, per_class=2):
    for k, wnid in enumerate(wnids):
        for i in range(per_class):
            write_image(os.path.join(root, "train", wnid, f"{wnid}_{i}.JPEG"), colour=(k, i, 0))


def write_flat_val(root, count):
    for i in range(1, count + 1):
        write_image(os.path.join(root, "val", f"ILSVRC2012_val_{i:08d}.JPEG"))


def _element(kind, payload):
    if 0 < len(payload) <= 4:   # MATLAB's small data element format
        return struct.pack("<HH", kind, len(payload)) + payload.ljust(4, b"\0")
    return struct.pack("<II", kind, len(payload)) + payload + b"\0" * (-len(payload) % 8)


def _matrix(name, mx_class, dims, body):
    payload = (_element(6, struct.pack("<II", mx_class, 0))
               + _element(5, struct.pack(f"<{len(dims)}i", *dims))
               + _element(1, name.encode("ascii")) + body)
    return struct.pack("<II", 14, len(payload)) + payload


def _value(value):
    if isinstance(value, str):
        return _matrix("", 4, (1, len(value)), _element(4, value.encode("utf-16-le")))
    return _matrix("", 6, (1, 1), _element(9, struct.pack("<d", float(value))))


def mat_struct_array(name, records):
    """A 1xN MATLAB struct array of str/number fields, as a miMATRIX element."""
    fields = list(records[0])
    body = _element(5, struct.pack("<i", 32))
    body += _element(1, b"".join(f.encode("ascii").ljust(32, b"\0") for f in fields))
    for record in records:
        body += b"".join(_value(record[f]) for f in fields)
    return _matrix(name, 2, (len(records), 1), body)


def write_mat(path, elements, compress=False):
    header = b"MATLAB 5.0 MAT-file, written by tianyuan tests".ljust(116, b" ")
    header += b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM"
    body = b""
    for element in elements:
        body += struct.pack("<II", 15, len(z := zlib.compress(element))) + z if compress \
            else element
    with open(path, "wb") as handle:
        handle.write(header + body)


def write_meta_mat(path, leaf_wnids, compress=False):
    """Leaves get ILSVRC2012_ID 1..n in the given order; one inner node follows."""
    records = [{"ILSVRC2012_ID": i + 1, "WNID": w, "words": f"name of {w}", "num_children": 0}
               for i, w in enumerate(leaf_wnids)]
    records.append({"ILSVRC2012_ID": len(records) + 1, "WNID": "n00000001", "words": "inner",
                    "num_children": 2})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_mat(path, [mat_struct_array("synsets", records)], compress)


# ---- CIFAR-10 -------------------------------------------------------------------------------

def cifar_batch(count, seed):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (count, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, count).tolist()
    data = images.transpose(0, 3, 1, 2).reshape(count, 3072)
    raw = {b"batch_label": b"batch", b"labels": labels, b"data": data,
           b"filenames": [b"f%d.png" % i for i in range(count)]}
    # protocol 4: the real batches are Python 2 pickles (BINSTRING data); Python 3 can only
    # write bytes as BINBYTES (protocol >= 3), which loads the same with encoding="bytes".
    return images, labels, pickle.dumps(raw, protocol=4)


def write_cifar(folder, count=3):
    """data_batch_1..5, test_batch, batches.meta; returns {name: (images, labels)}."""
    os.makedirs(folder, exist_ok=True)
    written = {}
    for seed, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        images, labels, blob = cifar_batch(count, seed)
        open(os.path.join(folder, name), "wb").write(blob)
        written[name] = (images, labels)
    meta = {b"label_names": [b"airplane"] * 10, b"num_cases_per_batch": count}
    open(os.path.join(folder, "batches.meta"), "wb").write(pickle.dumps(meta, protocol=4))
    return written


def tar_folder(folder, tar_path, arcname="cifar-10-batches-py"):
    with tarfile.open(tar_path, "w:gz") as archive:
        archive.add(folder, arcname=arcname)


# ---- COCO-format json -----------------------------------------------------------------------

def coco_json(images, annotations, categories):
    return {"info": {}, "licenses": [], "images": images, "annotations": annotations,
            "categories": categories}


def write_json(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(content, handle)


def ann(ann_id, image_id, category_id, bbox, iscrowd=0, keypoints=None):
    out = {"id": ann_id, "image_id": image_id, "category_id": category_id, "bbox": bbox,
           "area": float(bbox[2] * bbox[3]), "iscrowd": iscrowd, "segmentation": []}
    if iscrowd:
        out["segmentation"] = {"counts": [0, 4], "size": [2, 2]}
    if keypoints is not None:
        out["keypoints"] = keypoints
        out["num_keypoints"] = int(sum(1 for v in keypoints[2::3] if v > 0))
    return out

