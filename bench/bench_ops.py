"""Forward+backward time of conv2d, linear and batch_norm at ResNet-18 layer shapes.

Ours against PyTorch's in the same run when torch is installed (ratio = ours / torch,
lower is better); ours only otherwise. Medians of --repeat runs, 2 threads each.

    python bench/bench_ops.py [--batch 4] [--repeat 5] [--json out.json]
"""
import argparse
import json
import statistics
import time

import numpy as np

import tianyuan as ty
import tianyuan.functional as F

try:
    import torch
except ImportError:  # the reference is optional
    torch = None

# (name, in_channels, out_channels, kernel, stride, padding, input size) — ResNet-18 at 224
CONVS = [
    ("conv1", 3, 64, 7, 2, 3, 224),
    ("layer1.conv", 64, 64, 3, 1, 1, 56),
    ("layer2.0.conv1", 64, 128, 3, 2, 1, 56),
    ("layer2.conv", 128, 128, 3, 1, 1, 28),
    ("layer2.0.downsample", 64, 128, 1, 2, 0, 56),
    ("layer3.conv", 256, 256, 3, 1, 1, 14),
    ("layer4.conv", 512, 512, 3, 1, 1, 7),
]
NORMS = [("bn1", 64, 112), ("layer1.bn", 64, 56), ("layer2.bn", 128, 28),
         ("layer3.bn", 256, 14), ("layer4.bn", 512, 7)]
LINEARS = [("fc", 512, 1000)]


def median_time(fn, repeat):
    fn()  # warm-up (allocations, caches)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ours_step(op, arrays):
    tensors = [ty.tensor(a, requires_grad=True) for a in arrays]

    def run():
        for t in tensors:
            t.grad = None
        out = op(*tensors)
        out.backward(ty.ones_like(out))
    return run


def torch_step(op, arrays):
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]

    def run():
        for t in tensors:
            t.grad = None
        out = op(*tensors)
        out.backward(torch.ones_like(out))
    return run


def cases(batch):
    rng = np.random.default_rng(0)
    rand = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    for name, cin, cout, k, s, p, size in CONVS:
        arrays = [rand(batch, cin, size, size), rand(cout, cin, k, k)]
        yield (f"conv2d {name}", arrays,
               lambda x, w, s=s, p=p: F.conv2d(x, w, stride=s, padding=p),
               lambda x, w, s=s, p=p: torch.nn.functional.conv2d(x, w, stride=s, padding=p))
    for name, c, size in NORMS:
        arrays = [rand(batch, c, size, size), rand(c), rand(c)]
        mean, var = np.zeros(c, np.float32), np.ones(c, np.float32)
        yield (f"batch_norm {name}", arrays,
               lambda x, w, b, m=mean, v=var: F.batch_norm(x, ty.tensor(m), ty.tensor(v), w, b,
                                                           training=True),
               lambda x, w, b, m=mean, v=var: torch.nn.functional.batch_norm(
                   x, torch.tensor(m), torch.tensor(v), w, b, training=True))
    for name, cin, cout in LINEARS:
        arrays = [rand(batch, cin), rand(cout, cin), rand(cout)]
        yield f"linear {name}", arrays, F.linear, lambda x, w, b: torch.nn.functional.linear(x, w, b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    ty.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    print(f"batch {args.batch}, {args.threads} threads, median of {args.repeat}; ISA {ty.current_isa()}; "
          f"torch {'%s' % torch.__version__ if torch else 'not installed'}")
    header = f"{'op (fwd+bwd)':<30}{'ours ms':>10}{'torch ms':>10}{'ratio':>8}"
    print(header + "\n" + "-" * len(header))
    rows = []
    for name, arrays, ours, theirs in cases(args.batch):
        t_ours = median_time(ours_step(ours, arrays), args.repeat) * 1e3
        t_torch = median_time(torch_step(theirs, arrays), args.repeat) * 1e3 if torch else None
        ratio = t_ours / t_torch if t_torch else None
        rows.append({"op": name, "ours_ms": t_ours, "torch_ms": t_torch, "ratio": ratio})
        print(f"{name:<30}{t_ours:>10.2f}" + (f"{t_torch:>10.2f}{ratio:>8.2f}" if torch else f"{'-':>10}{'-':>8}"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
