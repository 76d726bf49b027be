"""ImageNet-1k class metadata: wnids in class-index order (sorted), names, ILSVRC2012 ids.

Class index `i` is the i-th wnid in sorted order (the order torchvision and MegEngine
use). Sources, first found wins for the class list:

1. the file shipped with the package, `datasets/meta/imagenet_classes.tsv`: 1000 lines
   `wnid<TAB>ilsvrc2012_id<TAB>class name(s)` (see datasets/meta/README.md);
2. the devkit's `meta.mat` (root/meta.mat or root/ILSVRC2012_devkit_t12/data/meta.mat);
3. Kaggle's `LOC_synset_mapping.txt` (root/): `wnid name, synonyms` per line;
4. the sorted folder names under root/train (names are then the wnids).

ILSVRC2012 ids (what the devkit's validation ground truth lists) come from 1. or 2. only.
"""
import os

from .matfile import read_mat

META_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "meta")
SHIPPED_TSV = os.path.join(META_DIR, "imagenet_classes.tsv")
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
            ids[int(parts[1])] = parts[0]
    return ImageNetMeta(wnids, names, ids, source=path)


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


def write_shipped_tsv(meta, path=None):
    """Write `meta` (with ILSVRC2012 ids) in the shipped format."""
    path = path or SHIPPED_TSV
    wnid_to_id = {wnid: i for i, wnid in meta.id_to_wnid.items()}
    missing = [w for w in meta.wnids if w not in wnid_to_id]
    if missing:
        raise ValueError(f"write_shipped_tsv: no ILSVRC2012 id for {len(missing)} wnids "
                         f"(first {missing[:3]}); read them from the devkit's meta.mat")
    with open(path, "w", encoding="utf-8") as handle:
        for wnid, name in zip(meta.wnids, meta.names):
            handle.write(f"{wnid}\t{wnid_to_id[wnid]}\t{name}\n")


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m tianyuan.datasets.imagenet_meta path/to/meta.mat")
    write_shipped_tsv(read_meta_mat(sys.argv[1]))
    print(f"wrote {SHIPPED_TSV}")
