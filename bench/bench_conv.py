"""Every convolution layer of ResNet-18/50, MobileNetV2 and ShuffleNetV2 x1.0 at 224x224:
our forward and forward+backward time against PyTorch's (same thread count), ONNX Runtime's
forward when it can be exported, ratios, totals per network, GFLOP/s against a peak.

    /root/benchvenv/bin/python bench/bench_conv.py --nets resnet18 --batch 1 [--repeats 5]
        [--rounds 3]

Identical layers are timed once and counted as often as they occur. Times are medians over
--repeats runs; on a shared machine they are noisy. The fp32 peak is measured in the run
(`tianyuan.ops.conv.fma_peak`: a register-only FMA loop on every thread, on the kernel path
that runs) unless --peak gives one (GFLOP/s); the in-run numpy sgemm rate is printed beside
it. Until 2026-12-03 the default was a constant 441, the 2-core AVX-512 peak of the host
issue 3 was measured on, which overstated the share of the peak on faster hosts.
"""
import argparse
import collections
import os
import time

import numpy as np

from blas_env import in_child, openblas_core, restart_with_blas_threads

# (cin, cout, k, stride, pad, groups, in_size)
Layer = collections.namedtuple("Layer", "cin cout k s p g hw")


def resnet(block_counts, bottleneck):
    layers, cin, hw = [Layer(3, 64, 7, 2, 3, 1, 224)], 64, 56
    for stage, n in enumerate(block_counts):
        width = 64 << stage
        cout = width * 4 if bottleneck else width
        for i in range(n):
            s = 2 if stage > 0 and i == 0 else 1
            if bottleneck:
                layers += [Layer(cin, width, 1, 1, 0, 1, hw), Layer(width, width, 3, s, 1, 1, hw),
                           Layer(width, cout, 1, 1, 0, 1, hw // s)]
            else:
                layers += [Layer(cin, width, 3, s, 1, 1, hw),
                           Layer(width, width, 3, 1, 1, 1, hw // s)]
            if s != 1 or cin != cout:
                layers.append(Layer(cin, cout, 1, s, 0, 1, hw))
            cin, hw = cout, hw // s
    return layers


def mobilenet_v2():
    rows = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1)]  # (t, c, n, s)
    layers, cin, hw = [Layer(3, 32, 3, 2, 1, 1, 224)], 32, 112
    for t, c, n, s in rows:
        for i in range(n):
            stride, hidden = s if i == 0 else 1, cin * t
            if t != 1:
                layers.append(Layer(cin, hidden, 1, 1, 0, 1, hw))
            layers += [Layer(hidden, hidden, 3, stride, 1, hidden, hw),
                       Layer(hidden, c, 1, 1, 0, 1, hw // stride)]
            cin, hw = c, hw // stride
    return layers + [Layer(320, 1280, 1, 1, 0, 1, 7)]


def shufflenet_v2_x1_0():
    layers, cin, hw = [Layer(3, 24, 3, 2, 1, 1, 224)], 24, 56
    for repeats, cout in zip((4, 8, 4), (116, 232, 464)):
        half = cout // 2
        layers += [Layer(cin, cin, 3, 2, 1, cin, hw), Layer(cin, half, 1, 1, 0, 1, hw // 2),
                   Layer(cin, half, 1, 1, 0, 1, hw), Layer(half, half, 3, 2, 1, half, hw),
                   Layer(half, half, 1, 1, 0, 1, hw // 2)]
        hw //= 2
        for _ in range(repeats - 1):
            layers += [Layer(half, half, 1, 1, 0, 1, hw), Layer(half, half, 3, 1, 1, half, hw),
                       Layer(half, half, 1, 1, 0, 1, hw)]
        cin = cout
    return layers + [Layer(464, 1024, 1, 1, 0, 1, 7)]


NETS = {"resnet18": lambda: resnet([2, 2, 2, 2], False),
        "resnet50": lambda: resnet([3, 4, 6, 3], True),
        "mobilenet_v2": mobilenet_v2, "shufflenet_v2_x1_0": shufflenet_v2_x1_0}


STAT = [np.median]  # --stat min: the least-disturbed run, for a machine shared with others


def median_time(fn, repeats):
    for _ in range(3):  # warm-up: algorithm choice, and the process's first big allocations
        fn()            # (a fresh 51 MB output took 4x longer the first few times here)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(STAT[0](times))


def flops(layer, batch):
    out = (layer.hw + 2 * layer.p - layer.k) // layer.s + 1
    return 2 * batch * layer.cout * out * out * layer.cin // layer.g * layer.k * layer.k


def ours(layer, batch, repeats):
    import tianyuan as ty
    import tianyuan.functional as F
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, layer.cin, layer.hw, layer.hw)).astype(np.float32)
    w = rng.standard_normal((layer.cout, layer.cin // layer.g, layer.k, layer.k)).astype(
        np.float32) * 0.1
    xt, wt = ty.tensor(x, requires_grad=True), ty.tensor(w, requires_grad=True)
    conv = lambda: F.conv2d(xt, wt, stride=layer.s, padding=layer.p, groups=layer.g)
    with ty.no_grad():
        gy = ty.tensor(np.ones(conv().shape, np.float32))
        fwd = median_time(conv, repeats)
    return fwd, median_time(lambda: conv().backward(gy), repeats)


def torch_times(layer, batch, repeats):
    import torch
    x = torch.randn(batch, layer.cin, layer.hw, layer.hw, requires_grad=True)
    w = torch.randn(layer.cout, layer.cin // layer.g, layer.k, layer.k, requires_grad=True)
    conv = lambda: torch.nn.functional.conv2d(x, w, None, layer.s, layer.p, 1, layer.g)
    with torch.no_grad():
        gy = torch.ones_like(conv())
        fwd = median_time(conv, repeats)
    return fwd, median_time(lambda: conv().backward(gy), repeats)


def ort_time(layer, batch, repeats, threads):
    """ONNX Runtime forward of the one-conv graph exported by torch; None when unavailable."""
    try:
        import io
        import onnxruntime as ort
        import torch
        module = torch.nn.Conv2d(layer.cin, layer.cout, layer.k, layer.s, layer.p,
                                 groups=layer.g, bias=False)
        x = torch.randn(batch, layer.cin, layer.hw, layer.hw)
        buf = io.BytesIO()
        torch.onnx.export(module, (x,), buf, dynamo=False)  # needs the onnx package
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: x.numpy()}
        return median_time(lambda: sess.run(None, feed), repeats)
    except Exception:  # noqa: BLE001  (optional peer: any failure means "not measured")
        return None


def sgemm_rate():
    a = np.random.rand(2048, 2048).astype(np.float32)
    t = median_time(lambda: a @ a, 3)
    return 2 * 2048 ** 3 / t / 1e9


def peer_times(layers, batch, repeats, threads):
    """{layer: (torch fwd, torch fwd+bwd, ort fwd or None)}, run in a child process: torch
    ships its own libgomp.so.1, and sharing one OpenMP runtime (and its wait policy) with us
    would slow one side or the other; each framework runs with its own defaults."""
    import torch
    torch.set_num_threads(threads)
    return {layer: torch_times(layer, batch, repeats) + (ort_time(layer, batch, repeats, threads),)
            for layer in layers}


def peer_info(threads):
    import torch
    return torch.__version__


def _median_or_none(values):
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def bench_net(name, batch, repeats, threads, peak, rounds):
    counts = collections.Counter(NETS[name]())
    rows, total = [], np.zeros(5)
    # one framework at a time: a peer's worker threads must not share our cores; the two
    # alternate `rounds` times so that a slow spell of the machine hits both, and each
    # layer's time is the median over the rounds of its per-round medians
    mine_runs, peer_runs = [], []
    for _ in range(rounds):
        mine_runs.append({layer: ours(layer, batch, repeats) for layer in counts})
        peer_runs.append(in_child(peer_times, list(counts), batch, repeats, threads))
    mine = {layer: tuple(np.median([run[layer] for run in mine_runs], axis=0))
            for layer in counts}
    peer = {layer: tuple(_median_or_none([run[layer][i] for run in peer_runs])
                         for i in range(3)) for layer in counts}
    for layer, count in counts.items():
        (f, fb), (tf, tfb, o) = mine[layer], peer[layer]
        gf = flops(layer, batch) / f / 1e9
        rows.append((layer, count, f, fb, tf, tfb, o, gf))
        total += count * np.array([f, fb, tf, tfb, o or 0.0])
    print(f"\n{name}, batch {batch}: {len(counts)} distinct layers, {sum(counts.values())} "
          f"convolutions; times in ms ({STAT[0].__name__} of {repeats}, median over {rounds} "
          f"alternating rounds); peak {peak:.0f} GFLOP/s")
    print(f"{'cin':>5}{'cout':>6}{'k':>3}{'s':>3}{'g':>5}{'hw':>5}{'x':>4} | {'fwd':>8}{'torch':>8}"
          f"{'ratio':>7}{'ort':>8} | {'f+b':>8}{'torch':>8}{'ratio':>7} | {'GF/s':>6}{'%pk':>5}")
    for layer, count, f, fb, tf, tfb, o, gf in rows:
        ort_s = f"{o * 1e3:8.2f}" if o else f"{'-':>8}"
        print(f"{layer.cin:>5}{layer.cout:>6}{layer.k:>3}{layer.s:>3}{layer.g:>5}{layer.hw:>5}"
              f"{count:>4} | {f * 1e3:8.2f}{tf * 1e3:8.2f}{f / tf:7.2f}{ort_s} | "
              f"{fb * 1e3:8.2f}{tfb * 1e3:8.2f}{fb / tfb:7.2f} | {gf:6.1f}{100 * gf / peak:5.0f}")
    f, fb, tf, tfb, o = total
    gflop = sum(flops(layer, batch) * c for layer, c in counts.items()) / 1e9
    ort_s = f"{o * 1e3:.1f} ms" if o else "-"
    print(f"TOTAL {name} b{batch}: fwd {f * 1e3:.1f} ms vs torch {tf * 1e3:.1f} ms "
          f"(ratio {f / tf:.2f}), ort {ort_s}; fwd+bwd {fb * 1e3:.1f} vs {tfb * 1e3:.1f} ms "
          f"(ratio {fb / tfb:.2f}); fwd {gflop / f:.1f} GFLOP/s = {100 * gflop / f / peak:.0f}% "
          f"of peak")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nets", default=",".join(NETS))
    parser.add_argument("--batch", default="1,16")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peak", type=float, default=None,
                        help="fp32 peak in GFLOP/s; default: measured in the run")
    parser.add_argument("--stat", choices=("median", "min"), default="median")
    # 3: the median of 3 alternating rounds survives one slow spell (see bench_int8.py)
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternate ours and the peers this many times per network")
    args = parser.parse_args()
    STAT[0] = np.median if args.stat == "median" else np.min
    restart_with_blas_threads(args.threads)
    import tianyuan as ty
    from tianyuan.ops.conv import fma_peak
    ty.set_num_threads(args.threads)
    peak = args.peak or fma_peak() / 1e9
    print(f"tianyuan ISA {ty.current_isa()}, torch {in_child(peer_info, args.threads)}, "
          f"{args.threads} threads,"
          f" fp32 peak {peak:.0f} GFLOP/s ({'--peak' if args.peak else 'measured: fma_peak'}),"
          f" numpy sgemm {sgemm_rate():.0f} GFLOP/s (OpenBLAS core {openblas_core()}),"
          f" OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')},"
          f" GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}")
    for batch in (int(b) for b in args.batch.split(",")):
        for name in args.nets.split(","):
            bench_net(name, batch, args.repeats, args.threads, peak, args.rounds)


if __name__ == "__main__":
    main()
