"""Image preprocessing: ours (tianyuan.functional) against OpenCV's cv2 on the same frames,
both on --threads threads (ty.set_num_threads, cv2.setNumThreads); medians of --repeat runs,
in alternating blocks of ours and cv2's; ratio = ours / cv2 (below 1: we are faster).

    python bench/bench_imgproc.py [--repeat 15] [--threads 2] [--json out.json]

Lines: a 1080p BGR frame resized to 224x224 and to the 800 short side (800x1422), uint8 and
float32, bilinear and area; warpAffine of the frame (rotation by 10 degrees about the centre,
scale 0.9, into 1080p, bilinear, constant border); NV12 -> BGR of a 1080p camera frame; and
uint8 HWC -> normalised float NCHW (ours in one pass; cv2 has no such op: numpy's
astype/subtract/divide/transpose stands in).
"""
import argparse
import json
import statistics
import time

import cv2
import numpy as np

import tianyuan as ty
import tianyuan.functional as F
from tianyuan.weights.preprocessing import IMAGENET_MEAN, IMAGENET_STD, pixel_values

MEAN = tuple(pixel_values(IMAGENET_MEAN)[::-1])   # BGR order, 0..255
STD = tuple(pixel_values(IMAGENET_STD)[::-1])


def frame(h=1080, w=1920, seed=0):
    """A photo-like 1080p BGR frame (smooth colour fields plus noise)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 32, w // 32, 3)).astype(np.uint8)
    img = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(img + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)


def lines(img):
    """(name, ours, theirs) callables."""
    inter = {"bilinear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA}
    out = []
    for dtype in ("uint8", "float32"):
        x = img if dtype == "uint8" else img.astype(np.float32) / 255
        for (h, w) in ((224, 224), (800, 1422)):
            for mode in ("bilinear", "area"):
                out.append((f"resize 1080p -> {h}x{w} {dtype} {mode}",
                            lambda x=x, h=h, w=w, m=mode: F.resize(x, (h, w), m),
                            lambda x=x, h=h, w=w, m=mode: cv2.resize(x, (w, h),
                                                                     interpolation=inter[m])))
    m = cv2.getRotationMatrix2D((960, 540), 10, 0.9)
    out.append(("warp_affine 1080p uint8 bilinear", lambda: F.warp_affine(img, m, (1080, 1920)),
                lambda: cv2.warpAffine(img, m, (1920, 1080), flags=cv2.INTER_LINEAR)))
    nv12 = cv2.cvtColor(img, cv2.COLOR_BGR2YUV_I420)   # planar; interleave U and V as NV12
    u = nv12[1080:1080 + 270].reshape(540, 960)
    v = nv12[1080 + 270:].reshape(540, 960)
    nv12 = np.concatenate([nv12[:1080], np.stack([u, v], -1).reshape(540, 1920)])
    out.append(("NV12 -> BGR 1080p", lambda: F.cvt_color(nv12, "nv12_to_bgr"),
                lambda: cv2.cvtColor(nv12, cv2.COLOR_YUV2BGR_NV12)))
    small = cv2.resize(img, (224, 224))
    mean, std = np.float32(MEAN), np.float32(STD)
    out.append(("HWC uint8 224 -> normalised NCHW float", lambda: F.to_nchw(small, MEAN, STD),
                lambda: ((small.astype(np.float32) - mean) / std).transpose(2, 0, 1).copy()))
    return out


def timed(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def block(fn, repeat):
    """`repeat` timed calls after a warm-up one. In blocks rather than call by call: two
    thread pools (OpenMP's and cv2's) spinning after their calls starved each other on 2
    vCPUs and made either side's time the other's."""
    fn()
    return [timed(fn) for _ in range(repeat)]


def run(repeat, threads, rounds=2):
    ty.set_num_threads(threads)
    cv2.setNumThreads(threads)
    rows = []
    for name, ours, theirs in lines(frame()):
        a, b = [], []
        for _ in range(rounds):
            a += block(ours, repeat)
            b += block(theirs, repeat)
        mo, mt = statistics.median(a), statistics.median(b)
        rows.append({"line": name, "ours_ms": mo, "cv2_ms": mt, "ratio": mo / mt})
        print(f"| {name} | {mo:.2f} | {mt:.2f} | {mo / mt:.2f} |", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    print(f"cv2 {cv2.__version__}, {args.threads} threads, medians of {args.repeat}")
    print("| line | ours ms | cv2 ms | ratio |\n|---|---:|---:|---:|")
    rows = run(args.repeat, args.threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
