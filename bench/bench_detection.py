"""Detection ops and one-image inference: ours against torchvision's in the same run when
torch and torchvision are installed (ratio = ours / theirs, lower is better), ours alone
otherwise (the peer column empty). Medians of --repeat runs, alternating ours and theirs.

    python bench/bench_detection.py [--repeat 5] [--size 800] [--json out.json]

Lines: roi_align forward and backward (512 RoIs of one 256-channel 200 x 304 level, 7 x 7,
sampling ratio 2), nms on 10k boxes (numpy spec, native, torchvision), batched_nms on 10k
boxes of 80 classes, and Faster R-CNN R50-FPN (random weights) on one image of --size.
"""
import argparse
import json
import statistics
import time

import numpy as np

import tianyuan as ty
import tianyuan.functional as F
from tianyuan.ops import boxes as B

try:
    import torch
    import torchvision
except ImportError:  # the reference is optional
    torch = torchvision = None


def median_time(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def random_boxes(n, seed, spread=1000.0, largest=200.0):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, spread, (n, 2))
    wh = rng.uniform(4, largest, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32)


def roi_align_lines(repeat):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 256, 200, 304)).astype(np.float32)
    boxes = random_boxes(512, 1, 800.0)
    rois = np.concatenate([np.zeros((512, 1), np.float32), boxes], axis=1)
    g = rng.standard_normal((512, 256, 7, 7)).astype(np.float32)
    xt = ty.tensor(x, requires_grad=True)

    def ours_bwd():
        xt.grad = None
        (F.roi_align(xt, rois, 7, 0.25, 2) * ty.tensor(g)).sum().backward()
    lines = [("roi_align fwd 512x256x7x7", lambda: F.roi_align(ty.tensor(x), rois, 7, 0.25, 2),
              None),
             ("roi_align fwd+bwd", ours_bwd, None)]
    if torch is not None:
        tx, tr = torch.tensor(x, requires_grad=True), torch.tensor(rois)
        tg = torch.tensor(g)

        def theirs_bwd():
            tx.grad = None
            (torchvision.ops.roi_align(tx, tr, 7, 0.25, 2) * tg).sum().backward()
        lines = [(lines[0][0], lines[0][1],
                  lambda: torchvision.ops.roi_align(tx.detach(), tr, 7, 0.25, 2)),
                 (lines[1][0], ours_bwd, theirs_bwd)]
    return [(name, median_time(ours, repeat), theirs and median_time(theirs, repeat))
            for name, ours, theirs in lines]


def nms_lines(repeat):
    boxes = random_boxes(10_000, 2)
    scores = np.random.default_rng(3).random(10_000).astype(np.float32)
    idxs = np.random.default_rng(4).integers(0, 80, 10_000)
    peer = batched_peer = None
    if torch is not None:
        tb, ts, ti = torch.tensor(boxes), torch.tensor(scores), torch.tensor(idxs)
        peer = lambda: torchvision.ops.nms(tb, ts, 0.5)                      # noqa: E731
        batched_peer = lambda: torchvision.ops.batched_nms(tb, ts, ti, 0.5)   # noqa: E731
    return [("nms 10k boxes (numpy spec)", median_time(lambda: B.nms(boxes, scores, 0.5), repeat),
             None),
            ("nms 10k boxes (native)", median_time(lambda: F.nms(boxes, scores, 0.5), repeat),
             peer and median_time(peer, repeat)),
            ("batched_nms 10k boxes, 80 classes",
             median_time(lambda: F.batched_nms(boxes, scores, idxs, 0.5), repeat),
             batched_peer and median_time(batched_peer, repeat))]


def inference_line(repeat, size):
    from tianyuan import zoo
    ty.manual_seed(0)
    model = zoo.fasterrcnn_resnet50_fpn(weights=None).eval()
    image = np.random.default_rng(5).random((3, size, size)).astype(np.float32)
    ours = median_time(lambda: model([image]), repeat)
    theirs = None
    if torch is not None:
        peer = torchvision.models.detection.fasterrcnn_resnet50_fpn(
            weights=None, weights_backbone=None).eval()
        timage = torch.tensor(image)
        with torch.no_grad():
            theirs = median_time(lambda: peer([timage]), repeat)
    return [(f"fasterrcnn_resnet50_fpn, one {size}x{size} image", ours, theirs)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    ty.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    rows = roi_align_lines(args.repeat) + nms_lines(args.repeat)
    if not args.skip_model:
        rows += inference_line(max(1, args.repeat // 2), args.size)
    print(f"{'line':44s} {'ours ms':>10s} {'torchvision ms':>15s} {'ratio':>7s}")
    for name, ours, theirs in rows:
        peer = f"{theirs * 1e3:15.2f}" if theirs else f"{'':15s}"
        ratio = f"{ours / theirs:7.2f}" if theirs else ""
        print(f"{name:44s} {ours * 1e3:10.2f} {peer} {ratio}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"line": n, "ours_s": o, "torchvision_s": t} for n, o, t in rows], f,
                      indent=1)


if __name__ == "__main__":
    main()
