"""Images/s of the ImageNet-style train pipeline: JPEG decode + RandomResizedCrop(224) +
horizontal flip + normalize (+ HWC->CHW), batches of --batch, with 0, 1 and 2 workers.

Against torchvision's equivalent pipeline (ImageFolder + RandomResizedCrop + flip +
ToTensor + Normalize, torch DataLoader) in the same run when torch/torchvision are
installed (ratio = ours / torchvision images/s, higher is better); ours only otherwise.
The images are written first: --images JPEGs of 500x375 (ImageNet's typical size) in
an ImageNet train layout under a temporary folder.

    python bench/bench_data.py [--images 256] [--batch 32] [--workers 0 1 2] [--json out.json]
"""
import argparse
import json
import os
import tempfile
import time

import cv2
import numpy as np

from tianyuan.datasets import DataLoader, ImageNet
from tianyuan.datasets.imagenet_meta import read_shipped_tsv
from tianyuan.datasets import transforms as T
from tianyuan.weights.preprocessing import IMAGENET_MEAN, IMAGENET_STD


def write_fake_imagenet(root, count, classes=8):
    rng = np.random.default_rng(0)
    wnids = read_shipped_tsv().wnids[:classes]   # real wnids: the shipped class list applies
    for i in range(count):
        folder = os.path.join(root, "train", wnids[i % classes])
        os.makedirs(folder, exist_ok=True)
        # smooth noise compresses like a photo more than white noise does
        small = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
        image = cv2.resize(small, (500, 375), interpolation=cv2.INTER_CUBIC)
        cv2.imwrite(os.path.join(folder, f"{i}.JPEG"), image, [cv2.IMWRITE_JPEG_QUALITY, 90])


def rate(loader, count):
    start = time.perf_counter()
    seen = sum(len(batch["label"] if isinstance(batch, dict) else batch[1]) for batch in loader)
    assert seen == count, (seen, count)
    return seen / (time.perf_counter() - start)


def ours(root, workers, batch):
    pipeline = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize(),
                          T.ToCHW()])
    dataset = ImageNet(root, "train", transform=pipeline)
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers, seed=0)
    return rate(loader, len(dataset))


def torchvision_rate(root, workers, batch):
    try:
        import torch
        from torchvision import datasets, transforms
    except ImportError:
        return None
    torch.set_num_threads(1)
    pipeline = transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    dataset = datasets.ImageFolder(os.path.join(root, "train"), transform=pipeline)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True,
                                         num_workers=workers)
    return rate(loader, len(dataset))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    cv2.setNumThreads(1)   # one core per process, as in the workers
    rows = []
    with tempfile.TemporaryDirectory() as root:
        write_fake_imagenet(root, args.images)
        print(f"{'workers':>7} {'ours img/s':>11} {'torchvision img/s':>18} {'ratio':>6}")
        for workers in args.workers:
            mine = ours(root, workers, args.batch)
            theirs = torchvision_rate(root, workers, args.batch)
            ratio = f"{mine / theirs:6.2f}" if theirs else "     -"
            other = f"{theirs:18.1f}" if theirs else f"{'not installed':>18}"
            print(f"{workers:>7} {mine:11.1f} {other} {ratio}")
            rows.append({"workers": workers, "ours": mine, "torchvision": theirs})
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
