"""ImageNet-1k (ILSVRC2012) classification.

Layouts read:
- `root/train/<wnid>/*.JPEG`;
- `root/val/<wnid>/*.JPEG` (class folders), or `root/val/*.JPEG` flat with the labels from
  the devkit's `ILSVRC2012_validation_ground_truth.txt` (ILSVRC2012 ids, one per line, in
  file-number order; mapped to wnids through the shipped class list or `meta.mat`) or from
  Kaggle's `LOC_val_solution.csv` (`ImageId,PredictionString`, the first token a wnid), or,
  when neither is there, from the package's shipped `datasets/meta/imagenet_val_labels.npy`
  (no devkit needed). `ds.label_source` says which of these gave the labels.
Ground-truth files are looked for in root/ and root/ILSVRC2012_devkit_t12/data/.

>>> ds = ImageNet("/data/imagenet", "val")            # doctest: +SKIP
>>> ds[0]["label"], ds.classes[ds[0]["label"]]        # doctest: +SKIP
"""
import csv
import os
import re

from .base import VisionDataset, list_images, require_path
from .folder import scan_class_folders
from . import imagenet_meta
from .imagenet_meta import ImageNetMeta, find_meta_mat, load_imagenet_meta, read_meta_mat

GROUND_TRUTH_TXT = "ILSVRC2012_validation_ground_truth.txt"
LOC_SOLUTION_CSV = "LOC_val_solution.csv"
_DEVKIT_DATA = os.path.join("ILSVRC2012_devkit_t12", "data")
_VAL_NUMBER = re.compile(r"ILSVRC2012_val_(\d+)")


def _find(root, name):
    for place in (os.path.join(root, name), os.path.join(root, _DEVKIT_DATA, name)):
        if os.path.isfile(place):
            return place
    return None


def _val_number(name, count, path):
    """N of ILSVRC2012_val_<N>.JPEG, checked to be a line/entry 1..count of `path`."""
    match = _VAL_NUMBER.match(name)
    number = int(match.group(1)) if match else 0
    if not 1 <= number <= count:
        raise ValueError(f"ImageNet: {name} has no entry in {path} ({count} entries; "
                         "expected files named ILSVRC2012_val_<number>.JPEG)")
    return number


def _has_class_folders(folder):
    return any(e.is_dir() and e.name.startswith("n") for e in os.scandir(folder))


class ImageNet(VisionDataset):
    """Items {"image", "label", "info"}; `classes` are wnids, `class_names` their names."""

    def __init__(self, root, split="train", transform=None, on_error="raise", backend="cv2"):
        super().__init__(root, transform, on_error, backend)
        if split not in ("train", "val"):
            raise ValueError(f"ImageNet: split must be 'train' or 'val', got {split!r}")
        self.split = split
        folder = os.path.join(self.root, split)
        require_path(self.root, "an ImageNet root with train/ and/or val/", "ImageNet")
        require_path(folder, f"the {split} images (<wnid>/*.JPEG folders"
                     + (" or flat *.JPEG files)" if split == "val" else ")"), "ImageNet")
        self.meta = self._meta(folder)
        self.classes, self.class_names = self.meta.wnids, self.meta.names
        if _has_class_folders(folder):
            self.label_source = folder
            self.samples = self._class_folder_samples(folder)
        else:
            self.samples = self._flat_val_samples(folder)

    def _meta(self, folder):
        meta = load_imagenet_meta(self.root)
        if meta is None and self.split == "val" and _has_class_folders(folder):
            wnids = sorted(e.name for e in os.scandir(folder) if e.is_dir())
            meta = ImageNetMeta(wnids, source=folder)
        if meta is None:
            raise FileNotFoundError(
                f"ImageNet: no class list for {self.root}: expected root/train/<wnid>/ folders, "
                f"root/meta.mat, root/{_DEVKIT_DATA}/meta.mat or root/LOC_synset_mapping.txt "
                "(the shipped datasets/meta/imagenet_classes.tsv is absent)")
        return meta

    def _class_folder_samples(self, folder):
        wnids = sorted(e.name for e in os.scandir(folder) if e.is_dir())
        unknown = [w for w in wnids if w not in self.meta.wnid_to_index]
        if unknown:
            raise ValueError(f"ImageNet: {len(unknown)} folders in {folder} are not classes of "
                             f"the class list from {self.meta.source}: {unknown[:5]}")
        return scan_class_folders(folder, wnids, self.meta.wnid_to_index, "ImageNet")

    def _flat_val_samples(self, folder):
        files = list_images(folder)
        if not files:
            raise FileNotFoundError(f"ImageNet: {folder} holds no images; expected "
                                    "ILSVRC2012_val_*.JPEG files or <wnid>/ folders")
        txt, loc = _find(self.root, GROUND_TRUTH_TXT), _find(self.root, LOC_SOLUTION_CSV)
        shipped = imagenet_meta.SHIPPED_VAL_LABELS
        if txt:
            labels = self._labels_from_txt(txt, files)
        elif loc:
            labels = self._labels_from_csv(loc, files)
        elif os.path.isfile(shipped) and len(self.meta) == imagenet_meta.NUM_CLASSES:
            labels = self._labels_from_npy(shipped, files)
        else:
            why = (f"needs the 1000-class list; have {len(self.meta)} classes from "
                   f"{self.meta.source}" if os.path.isfile(shipped) else "is absent")
            raise FileNotFoundError(
                f"ImageNet: {folder} is flat but no ground truth was found: expected "
                f"{GROUND_TRUTH_TXT} or {LOC_SOLUTION_CSV} in {self.root} or "
                f"{os.path.join(self.root, _DEVKIT_DATA)} (the shipped {shipped} {why})")
        self.label_source = txt or loc or shipped
        return [(os.path.join(folder, f), label) for f, label in zip(files, labels)]

    def _ids_from_meta_mat(self, path):
        """Fill meta.id_to_wnid from meta.mat when the class list has no ILSVRC2012 ids."""
        mat = find_meta_mat(self.root)
        if mat is None:
            raise FileNotFoundError(
                f"ImageNet: {path} lists ILSVRC2012 ids; mapping them to wnids needs the "
                f"devkit's meta.mat in {self.root} or {os.path.join(self.root, _DEVKIT_DATA)} "
                f"(the class list from {self.meta.source} has no ids)")
        from_mat = read_meta_mat(mat)
        if from_mat.wnids != self.meta.wnids:
            raise ValueError(f"ImageNet: {mat} and {self.meta.source} list different classes")
        self.meta.id_to_wnid = from_mat.id_to_wnid

    def _labels_from_txt(self, path, files):
        if not self.meta.id_to_wnid:
            self._ids_from_meta_mat(path)
        with open(path) as handle:
            ids = [int(line) for line in handle if line.strip()]
        labels = []
        for name in files:
            number = _val_number(name, len(ids), path)
            wnid = self.meta.id_to_wnid.get(ids[number - 1])
            if wnid not in self.meta.wnid_to_index:
                raise ValueError(f"ImageNet: {path} line {number} has ILSVRC2012 id "
                                 f"{ids[number - 1]}, unknown to {self.meta.source}")
            labels.append(self.meta.wnid_to_index[wnid])
        return labels

    def _labels_from_npy(self, path, files):
        labels = imagenet_meta.read_shipped_val_labels(path)
        return [int(labels[_val_number(name, len(labels), path) - 1]) for name in files]

    def _labels_from_csv(self, path, files):
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle))
        if not rows or rows[0][:2] != ["ImageId", "PredictionString"]:
            raise ValueError(f"ImageNet: {path} must start with 'ImageId,PredictionString'")
        wnid_of = {row[0]: row[1].split()[0] for row in rows[1:] if len(row) >= 2 and row[1]}
        labels = []
        for name in files:
            wnid = wnid_of.get(os.path.splitext(name)[0])
            if wnid is None:
                raise ValueError(f"ImageNet: {name} has no row in {path}")
            if wnid not in self.meta.wnid_to_index:
                raise ValueError(f"ImageNet: {path} gives {name} the class {wnid}, unknown to "
                                 f"the class list from {self.meta.source}")
            labels.append(self.meta.wnid_to_index[wnid])
        return labels

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        image = self.load_image(path)
        if image is None:
            return None
        info = {"index": int(index), "file_name": path, "orig_size": image.shape[:2]}
        return self.finish({"image": image, "label": label, "info": info})

    @property
    def targets(self):
        return [label for _, label in self.samples]
