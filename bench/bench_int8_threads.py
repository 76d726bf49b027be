"""How our int8 and float32 convolutions scale with threads, layer by layer: every conv of
the bench_int8 networks timed at each count of --threads (the counts alternate, --rounds
times; medians), then per network the totals at each count and the total if every layer ran
at its own best count: what a per-layer thread count chosen by work could gain at most.
On the 16-vCPU AMX host (bench/RESULTS.md) the int8 layers of MobileNetV2 and ShuffleNetV2
at batch 1 (10-60 us each) gained little from 16 threads; --layers prints each layer's
multiply-adds and best count, the data a work-based thread count would be set from. First,
what an empty parallel region costs at each count (a small layer pays it once a call or more).
OpenBLAS (numpy's, which a few float paths call) runs the largest count throughout.

    python bench/bench_int8_threads.py [--nets mobilenet_v2,...] [--batches 1,16]
                                       [--threads 1,2,4,8,16] [--rounds 3] [--layers]
                                       [--json PATH]
"""
import argparse
import json

import numpy as np

from bench_int8 import NETWORKS, layer_inputs, layer_macs, median_ms, networks_and_batches, ours
from blas_env import restart_with_blas_threads
import tianyuan as ty
import tianyuan._C as _C


def sweep(layers, batch, counts, repeat, rounds):
    """{"int8" | "f32": (layers, counts) ms}, each the median over rounds."""
    fns = []
    for _, conv, shape in layers:
        x_u8, x_f32 = layer_inputs(shape, batch)
        fns.append(ours(conv, x_u8, x_f32))
    t = np.zeros((rounds, 2, len(layers), len(counts)))
    for r in range(rounds):
        for j, n in enumerate(counts):
            ty.set_num_threads(n)
            for i, pair in enumerate(fns):
                for c, fn in enumerate(pair):
                    t[r, c, i, j] = median_ms(fn, repeat)
    med = np.median(t, axis=0)
    return {"int8": med[0], "f32": med[1]}


def region_costs(counts, pauses=(0.0, 50.0)):
    """{count: [us]}: an empty parallel region's fork and join at each thread count, back to
    back and 50 us after the last (Python's time between two layers), median of 2000; printed.
    A small layer pays it once a call or more, whatever its work."""
    out = {}
    for n in counts:
        ty.set_num_threads(n)
        out[n] = [_C.testing.region_cost_us(2000, p) for p in pauses]
    print("an empty parallel region, us back to back / 50 us after the last: " + ", ".join(
        f"{n} threads {a:.2f} / {b:.2f}" for n, (a, b) in out.items()))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", default=",".join(NETWORKS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--threads", default="1,2,4,8,16", help="thread counts to compare")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", action="store_true", help="print every layer")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    counts = sorted({int(n) for n in args.threads.split(",")})
    restart_with_blas_threads(counts[-1])
    print(f"ISA {ty.current_isa()}, thread counts {counts} (the library's default here: "
          f"{ty.get_num_threads()}); median of {args.repeat}, median over {args.rounds} "
          "rounds")
    results = {"isa": ty.current_isa(), "threads": counts, "networks": {},
               "region_us": region_costs(counts)}
    for net, layers, batch in networks_and_batches(parser, args.nets, args.batches):
        t = sweep(layers, batch, counts, args.repeat, args.rounds)
        print(f"{net} b{batch}, ms int8 / f32 at " + ", ".join(
            f"{n}: {t['int8'][:, j].sum():.2f} / {t['f32'][:, j].sum():.2f}"
            for j, n in enumerate(counts)))
        for col in ("int8", "f32"):
            top, best = t[col][:, -1].sum(), t[col].min(axis=1).sum()
            print(f"    {col}: each layer at its best count {best:.2f} ms, "
                  f"{best / top:.2f}x its time at {counts[-1]}")
        rows = []
        for i, (name, conv, shape) in enumerate(layers):
            macs = layer_macs(conv, shape, batch)
            best = counts[int(np.argmin(t["int8"][i]))]
            rows.append({"layer": name, "macs": macs, "int8": t["int8"][i].tolist(),
                         "f32": t["f32"][i].tolist(), "int8_best": best})
            if args.layers:
                print(f"    {name:24s} {macs / 1e6:8.1f} M MACs  int8 us " +
                      " ".join(f"{1e3 * v:7.1f}" for v in t["int8"][i]) + f"  best {best}")
        results["networks"][f"{net}_b{batch}"] = rows
        if args.json:  # after each network: a killed run keeps what it has
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
