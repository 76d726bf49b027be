"""CIFAR-10 from the python batches or the `cifar-10-python.tar.gz` tarball.

Batches are pickles; they are read only through `tianyuan.io.safe_unpickle`, which
admits the numpy globals and latin-1 `_codecs.encode` (bytes at protocol 2), nothing else.
The tarball is read in memory (nothing is extracted).

>>> ds = CIFAR10("/data/cifar10", train=True)      # doctest: +SKIP
>>> len(ds), ds[0]["image"].shape                  # (50000, (32, 32, 3))  # doctest: +SKIP
"""
import os
import tarfile

import numpy as np

from tianyuan.io import BYTES_GLOBALS, NUMPY_GLOBALS, safe_unpickle

from .base import require_path

TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_BATCHES = ["test_batch"]
FOLDER = "cifar-10-batches-py"
TARBALL = "cifar-10-python.tar.gz"
CLASSES = ["airplane", "automobile", "bird", "cat", "deer",
           "dog", "frog", "horse", "ship", "truck"]


def _parse_batch(raw, source):
    """(images (N, 32, 32, 3) uint8, labels (N,) int64) from one unpickled batch dict."""
    if not isinstance(raw, dict) or b"data" not in raw or b"labels" not in raw:
        raise ValueError(f"CIFAR10: {source} is not a CIFAR-10 batch (no b'data'/b'labels')")
    data = np.asarray(raw[b"data"], dtype=np.uint8)
    labels = np.asarray(raw[b"labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(f"CIFAR10: {source} has data {data.shape} and {len(labels)} labels; "
                         "expected (N, 3072) and N")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"CIFAR10: {source} has labels outside 0..9")
    # rows are 1024 red, 1024 green, 1024 blue values, each 32x32 row-major: (N, 3, 32, 32)
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


# numpy arrays, and bytes as Python 3 pickles them at protocol 2
ALLOWED = {**NUMPY_GLOBALS, **BYTES_GLOBALS}


def _read_folder(folder, names):
    batches = []
    for name in names:
        path = require_path(os.path.join(folder, name), "a CIFAR-10 python batch", "CIFAR10")
        raw = safe_unpickle(path, allowed=ALLOWED, encoding="bytes")
        batches.append(_parse_batch(raw, path))
    return batches


def _read_tarball(path, names):
    batches = []
    with tarfile.open(path, "r:gz") as archive:
        for name in names:
            member = f"{FOLDER}/{name}"
            try:
                handle = archive.extractfile(member)
            except KeyError:
                handle = None
            if handle is None:
                raise FileNotFoundError(f"CIFAR10: {path} has no member {member}")
            raw = safe_unpickle(handle, allowed=ALLOWED, encoding="bytes",
                                source=f"{path}:{member}")
            batches.append(_parse_batch(raw, f"{path}:{member}"))
    return batches


def _locate(root):
    """('folder', path) or ('tarball', path) for the first layout found under `root`."""
    if os.path.isfile(root) and root.endswith((".tar.gz", ".tgz")):
        return "tarball", root
    for folder in (os.path.join(root, FOLDER), root):
        if os.path.isfile(os.path.join(folder, "batches.meta")) or \
                os.path.isfile(os.path.join(folder, "test_batch")):
            return "folder", folder
    if os.path.isfile(os.path.join(root, TARBALL)):
        return "tarball", os.path.join(root, TARBALL)
    raise FileNotFoundError(f"CIFAR10: found no CIFAR-10 data at {root}; expected "
                            f"{FOLDER}/ with data_batch_1..5, test_batch, batches.meta, "
                            f"those files directly, or {TARBALL}")


class CIFAR10:
    """Items {"image" (32, 32, 3) uint8 RGB, "label", "info"}; all images held in memory."""

    def __init__(self, root, train=True, transform=None):
        self.root = os.fspath(root)
        require_path(self.root, "CIFAR-10 batches or the tarball", "CIFAR10")
        kind, where = _locate(self.root)
        names = TRAIN_BATCHES if train else TEST_BATCHES
        batches = _read_folder(where, names) if kind == "folder" else _read_tarball(where, names)
        self.images = np.concatenate([images for images, _ in batches])
        self.labels = np.concatenate([labels for _, labels in batches])
        self.classes = list(CLASSES)
        self.transform = transform
        self.source = where

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        item = {"image": self.images[index], "label": int(self.labels[index]),
                "info": {"index": int(index), "file_name": self.source}}
        return self.transform(item) if self.transform is not None else item

    @property
    def targets(self):
        return self.labels.tolist()
