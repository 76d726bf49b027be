"""Detection ops and whole detectors: ours against torchvision's in the same run when torch
and torchvision are installed (ratio = ours / theirs, lower is better), ours alone otherwise
(the peer column empty). Medians of --repeat runs (ops) or --rounds rounds (models),
alternating ours and theirs.

    python bench/bench_detection.py [--repeat 5] [--size 800x1216] [--batches 1,2]
        [--rounds 3] [--train-size 512x640] [--train-batch 2] [--skip-ops] [--skip-model]
        [--json out.json]

Op lines: roi_align forward and backward (512 RoIs of one 256-channel 200 x 304 level,
7 x 7, sampling ratio 2), nms on 10k boxes (numpy spec, native, torchvision), batched_nms on
10k boxes of 80 classes. Model lines: RetinaNet and Faster R-CNN R50-FPN (random weights)
on --batches images of --size, ours fp32 and int8 (PTQ on two of the images) against
torchvision's fp32, whole and network only (`run_network`). Training lines: one SGD step of
each model on --train-batch images of --train-size, images/s, ours against torchvision's
(the issue's target: >= 1.0x).
"""
import argparse
import contextlib
import json
import statistics
import time

import numpy as np

from int8_peers import median_ms
import tianyuan as ty
import tianyuan.functional as F
from tianyuan import quantization as Q
from tianyuan.autograd import no_grad
from tianyuan.ops import boxes as B
from tianyuan.tensor import Tensor

try:
    import torch
    import torchvision
except ImportError:  # the reference is optional
    torch = torchvision = None


def median_time(fn, repeat):
    """Seconds: the median of `repeat` runs after a warm-up (int8_peers.median_ms)."""
    return median_ms(fn, repeat) / 1000.0


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


MODELS = ("retinanet_resnet50_fpn", "fasterrcnn_resnet50_fpn")


def int8_model(model, images):
    """PTQ as `tianyuan quantize method=ptq`: histogram calibration on `images`, then int8."""
    qat = Q.quantize_qat(model, Q.calibration_qconfig)
    return Q.quantize(Q.calibrate(qat, [images], lambda m, batch: m(batch)))


def alternating(fns, rounds):
    """{name: median seconds}: each fn once to warm up, then `rounds` rounds of one call each
    in turn (ours and the peer's alternate, so a slow stretch of a shared host hits both)."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def model_rows(arch, batches, height, width, rounds):
    """Per batch size: ours fp32 and int8 (the whole detector, and `run_network`: backbone,
    FPN and heads, what int8 runs; decoding and NMS are float in both) against torchvision's
    fp32. Random weights; images resized nowhere (min_size = height, max_size = width)."""
    from tianyuan import zoo
    ty.manual_seed(0)
    sizes = dict(min_size=height, max_size=max(height, width))
    fp32 = getattr(zoo, arch)(weights=None, **sizes).eval()
    rng = np.random.default_rng(5)
    images = [rng.random((3, height, width)).astype(np.float32) for _ in range(max(batches))]
    int8 = int8_model(fp32, images[:2])
    peer = None
    if torch is not None:
        peer = getattr(torchvision.models.detection, arch)(weights=None, weights_backbone=None,
                                                           **sizes).eval()
    rows = []
    for n in batches:
        batch = Tensor(fp32.transform(images[:n])[0])
        fns = {"fp32": lambda: fp32(images[:n]), "int8": lambda: int8(images[:n]),
               "net fp32": lambda: fp32.run_network(batch),
               "net int8": lambda: int8.run_network(batch)}
        if peer is not None:
            timages = [torch.from_numpy(im) for im in images[:n]]
            fns["torchvision"] = lambda: peer(timages)
        with no_grad(), torch.no_grad() if torch is not None else contextlib.nullcontext():
            rows.append((arch, n, alternating(fns, rounds)))
    return rows


def _targets(n, height, width, seed=6):
    """Three random boxes with labels in 1..4 per image (numpy, as our detectors take them)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lo = rng.uniform(0, 0.6, (3, 2)) * (width, height)
        size = rng.uniform(0.1, 0.4, (3, 2)) * (width, height)
        out.append({"boxes": np.concatenate([lo, lo + size], 1).astype(np.float32),
                    "labels": rng.integers(1, 5, 3)})
    return out


def training_row(arch, n, height, width, rounds):
    """One SGD step (forward with targets, the summed losses' backward, the update) on n
    images with three boxes each, ours against torchvision's: images/s of each. Both
    builders' defaults without weights: BatchNorm trained, all five backbone stages trained."""
    from tianyuan import optim, zoo
    ty.manual_seed(0)
    sizes = dict(min_size=height, max_size=max(height, width))
    rng = np.random.default_rng(7)
    images = [rng.random((3, height, width)).astype(np.float32) for _ in range(n)]
    targets = _targets(n, height, width)
    ours = getattr(zoo, arch)(weights=None, num_classes=5, **sizes).train()
    opt = optim.SGD(ours.parameters(), lr=1e-3, momentum=0.9)

    def ours_step():
        loss = sum(ours(images, [dict(t) for t in targets]).values())
        opt.zero_grad()
        loss.backward()
        opt.step()
    fns = {"ours": ours_step}
    if torch is not None:
        torch.manual_seed(0)
        theirs = getattr(torchvision.models.detection, arch)(
            weights=None, weights_backbone=None, num_classes=5, **sizes).train()
        topt = torch.optim.SGD(theirs.parameters(), lr=1e-3, momentum=0.9)
        timages = [torch.from_numpy(im) for im in images]
        ttargets = [{"boxes": torch.from_numpy(t["boxes"]),
                     "labels": torch.from_numpy(t["labels"])} for t in targets]

        def theirs_step():
            loss = sum(theirs(timages, ttargets).values())
            topt.zero_grad()
            loss.backward()
            topt.step()
        fns["torchvision"] = theirs_step
    t = alternating(fns, rounds)
    return arch, n, {name: n / sec for name, sec in t.items()}


def print_models(rows, height, width):
    print(f"\n{'model, ' + str(height) + 'x' + str(width):34s} {'b':>2s} {'fp32 s':>7s} "
          f"{'int8 s':>7s} {'tv s':>7s} {'fp32/tv':>8s} {'int8/tv':>8s} {'net fp32':>9s} "
          f"{'net int8':>9s} {'int8/fp32':>9s}")
    for arch, n, t in rows:
        tv = t.get("torchvision")
        vs = (f"{t['fp32'] / tv:8.2f} {t['int8'] / tv:8.2f}" if tv else f"{'':8s} {'':8s}")
        print(f"{arch:34s} {n:2d} {t['fp32']:7.2f} {t['int8']:7.2f} "
              f"{tv if tv else float('nan'):7.2f} {vs} {t['net fp32']:9.2f} "
              f"{t['net int8']:9.2f} {t['net int8'] / t['net fp32']:9.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--size", default="800x1216", help="HxW of the model lines' images")
    parser.add_argument("--batches", default="1,2")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=3, help="the model lines' rounds")
    parser.add_argument("--skip-ops", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--train-size", default="512x640",
                        help="HxW of the training lines' images (0x0: no training lines)")
    parser.add_argument("--train-batch", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    ty.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    rows = [] if args.skip_ops else roi_align_lines(args.repeat) + nms_lines(args.repeat)
    print(f"{'line':44s} {'ours ms':>10s} {'torchvision ms':>15s} {'ratio':>7s}")
    for name, ours, theirs in rows:
        peer = f"{theirs * 1e3:15.2f}" if theirs else f"{'':15s}"
        ratio = f"{ours / theirs:7.2f}" if theirs else ""
        print(f"{name:44s} {ours * 1e3:10.2f} {peer} {ratio}")
    models = []
    if not args.skip_model:
        height, width = (int(v) for v in args.size.split("x"))
        batches = [int(b) for b in args.batches.split(",")]
        for arch in args.models.split(","):
            models += model_rows(arch, batches, height, width, args.rounds)
        print_models(models, height, width)
    training = []
    train_h, train_w = (int(v) for v in args.train_size.split("x"))
    if train_h and not args.skip_model:
        print(f"\n{'training step, ' + args.train_size:34s} {'b':>2s} {'ours img/s':>11s} "
              f"{'tv img/s':>9s} {'ours/tv':>8s}")
        for arch in args.models.split(","):
            training.append(training_row(arch, args.train_batch, train_h, train_w,
                                         args.rounds))
            _, n, ips = training[-1]
            tv = ips.get("torchvision")
            ratio = ips["ours"] / tv if tv else float("nan")
            print(f"{arch:34s} {n:2d} {ips['ours']:11.3f} "
                  f"{tv if tv else float('nan'):9.3f} {ratio:8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ops": [{"line": n, "ours_s": o, "torchvision_s": t} for n, o, t in rows],
                       "models": [{"model": a, "batch": n, "seconds": t} for a, n, t in models],
                       "training": [{"model": a, "batch": n, "images_per_s": t}
                                    for a, n, t in training]},
                      f, indent=1)


if __name__ == "__main__":
    main()
