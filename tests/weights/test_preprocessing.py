"""One definition of ImageNet's mean and std (weights/preprocessing.py); every other copy is
derived from it: the manifest's presets, the zoo's cards, the transforms' 0..255 defaults."""
import os
import re

from tianyuan import weights
from tianyuan.datasets import transforms as T
from tianyuan.weights import preprocessing as P

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PRESETS = [v for k, v in vars(P).items() if k.isupper() and isinstance(v, dict)]


def test_derived_scales_are_the_decimal_tables():
    assert T.IMAGENET_MEAN == P.pixel_values(P.IMAGENET_MEAN) == (123.675, 116.28, 103.53)
    assert T.IMAGENET_STD == P.pixel_values(P.IMAGENET_STD) == (58.395, 57.12, 57.375)
    assert P.MEGENGINE["mean"] == [103.53, 116.28, 123.675] and P.MEGENGINE["channels"] == "BGR"
    assert P.MEGENGINE["std"] == [57.375, 57.12, 58.395]
    assert P.TORCHVISION_V2["resize"] == 232 and P.TORCHVISION_V1["resize"] == 256


def test_every_manifest_entry_uses_a_preset():
    for entry in weights.list_entries():
        assert entry.preprocessing in PRESETS, entry.name


def test_no_other_source_file_spells_the_statistics_out():
    """yaml configs may (they cannot import); Python files import them."""
    pattern = re.compile(r"0\.485|0\.229|123\.675|58\.395|103\.53\b")
    found = []
    for folder in ("framework", "zoo", "weights", "datasets", "evaluation", "trainers", "bench"):
        for base, _dirs, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                path = os.path.join(base, name)
                if not name.endswith(".py") or path.endswith(os.path.join("weights",
                                                                          "preprocessing.py")):
                    continue
                with open(path, encoding="utf-8") as handle:
                    for number, line in enumerate(handle, 1):
                        if pattern.search(line.split("#")[0]):   # a comment may say it
                            found.append(f"{os.path.relpath(path, ROOT)}:{number}")
    assert not found, found
