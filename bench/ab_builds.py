"""Two builds of tianyuan (or one build under two environments) timed against each other on the
int8 convolution layers of a bench_int8 network, in alternating processes. Each round starts
one process a side, in the order A B, then B A the next round; a process times every chosen
layer (one warm-up call, then --calls calls: their minimum and median). Per layer and for
the total, the ratio B / A of each round's minima (--stat median: medians, as bench_int8
takes), then the median over the rounds and their range. Made for changes of a few per cent
on a shared machine whose speed drifts between runs minutes apart: a ratio is only as good
as its range (bench/RESULTS.md, the twenty-fifth session's store experiments: 0.97x in two
comparisons, 1.00x in a third).

    python bench/ab_builds.py A B [--env-a K=V,...] [--env-b K=V,...] [--net resnet18]
                              [--batch 16] [--layers all|NAME,PREFIX*,...] [--rounds 6]
                              [--calls 10] [--stat min|median] [--threads 2]
                              [--algorithm auto] [--layout-a model|nchw|channels_last|...]
                              [--layout-b ...] [--json PATH]

A and B are checkouts of this repository with the native extension built in place
(`python setup.py build_ext --inplace`), or the same checkout twice with --env-b setting,
say, a switch of a timing-only build, or --layout-b giving B's convolutions another layout
(bench_int8.LAYOUTS; by default each layer's in the network's int8 model, as bench_int8 times
it). Each side imports its own checkout's package
(assembled from symbolic links as setup.py's ROOTS map it); the layers and their timing
are this file's bench_int8.py.
"""
import argparse
import ast
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
STATS = ["min", "median"]  # what a process reports of a layer's calls, in this order
LAYOUTS = ["nchw", "channels_last", "to_channels_last"]  # bench_int8.LAYOUTS (not imported here)


def package_roots(checkout):
    """{package: folder} of a checkout, read from its setup.py's ROOTS (not run)."""
    path = os.path.join(checkout, "setup.py")
    try:
        tree = ast.parse(open(path).read(), path)
    except OSError as error:
        raise SystemExit(f"ab_builds: {checkout} is not a checkout of tianyuan: {error}")
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "ROOTS"):
            return ast.literal_eval(node.value)
    raise SystemExit(f"ab_builds: {path} has no ROOTS")


def make_site(checkout, site):
    """Lays out `site` so that `import tianyuan` there imports the checkout's package: each
    root package a folder of symbolic links to its source folder's entries, the sub-roots
    (tianyuan.zoo, ...) links inside it."""
    checkout = os.path.abspath(checkout)
    roots = package_roots(checkout)
    if not glob.glob(os.path.join(checkout, roots["tianyuan"], "_C*.so")):
        raise SystemExit(f"ab_builds: {checkout} has no native extension built; run "
                         f"`python setup.py build_ext --inplace` there first")
    for name, folder in sorted(roots.items(), key=lambda item: item[0].count(".")):
        where = os.path.join(site, *name.split("."))
        if name.count(".") > 0:  # a sub-root: one link into its parent's folder
            os.symlink(os.path.join(checkout, folder), where)
            continue
        os.makedirs(where)
        for entry in os.listdir(os.path.join(checkout, folder)):
            os.symlink(os.path.join(checkout, folder, entry), os.path.join(where, entry))
    return site


def select(layers, which):
    """The layers named in `which` ("all", or names and PREFIX* patterns, comma-separated)."""
    if which == "all":
        return layers
    keys = which.split(",")
    chosen = [layer for layer in layers if any(
        layer[0] == k or (k.endswith("*") and layer[0].startswith(k[:-1])) for k in keys)]
    if not chosen:
        raise SystemExit(f"ab_builds: --layers {which!r} matches none of "
                         f"{', '.join(name for name, _, _ in layers)}")
    return chosen


def child(args):
    """In a side's process: {layer: [min ms, median ms]} as JSON on stdout."""
    sys.path.insert(0, HERE)
    import time

    import bench_int8 as B
    import tianyuan as ty
    ty.set_num_threads(args.threads)
    out = {}
    layers = B.conv_layers(args.net)
    model = dict(zip([name for name, _, _ in layers], B.our_layouts(layers)))
    for name, conv, shape in select(layers, args.layers):
        x_u8, x_f32 = B.layer_inputs(shape, args.batch)
        layout = model[name] if args.layout == "model" else args.layout
        fn = B.ours(conv, x_u8, x_f32, 8, args.algorithm, layout)[0]
        fn()
        times = []
        for _ in range(args.calls):
            start = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - start))
        out[name] = [min(times), float(np.median(times))]
    print(json.dumps({"package": os.path.dirname(os.path.abspath(ty.__file__)), "layers": out}))


def parse_env(text, flag):
    """"K=V,K=V" (flag: the option, for the error) -> {K: V}."""
    env = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"ab_builds: {flag} wants K=V[,K=V...], got {item!r}")
        env[key] = value
    return env


def run_side(checkout, site, env, args, layout="model"):
    """One side's process on `checkout` (imported from `site`) -> {layer: [min, median]}."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--net", args.net,
           "--batch", str(args.batch), "--layers", args.layers, "--calls", str(args.calls),
           "--threads", str(args.threads), "--algorithm", args.algorithm, "--layout", layout]
    full = {**os.environ, **env, "PYTHONPATH": site}
    done = subprocess.run(cmd, env=full, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"ab_builds: the side of {checkout} (environment {env}) failed:\n"
                         f"{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if os.path.realpath(result["package"]) != os.path.realpath(os.path.join(site, "tianyuan")):
        raise SystemExit(f"ab_builds: the side of {checkout} imported tianyuan from "
                         f"{result['package']} (an installed copy first on the path?)")
    return result["layers"]


def compare(rounds_a, rounds_b, stat=0):
    """Per layer and "total": the median over rounds of B's time / A's, and its range; a
    round's time is its calls' minimum (stat 0) or median (stat 1)."""
    names = list(rounds_a[0])
    rows = {}
    for name in names + ["total"]:
        if name == "total":
            a = [sum(r[n][stat] for n in names) for r in rounds_a]
            b = [sum(r[n][stat] for n in names) for r in rounds_b]
        else:
            a = [r[name][stat] for r in rounds_a]
            b = [r[name][stat] for r in rounds_b]
        ratios = [y / x for x, y in zip(a, b)]
        rows[name] = {"a_ms": float(np.median(a)), "b_ms": float(np.median(b)),
                      "ratio": float(np.median(ratios)),
                      "low": float(min(ratios)), "high": float(max(ratios))}
    return rows


def write_json(args, times, rows):
    """--json: the arguments, every round's times a side, the ratios so far."""
    with open(args.json, "w") as f:
        json.dump({"args": vars(args), "a": times[0], "b": times[1], "ratios": rows}, f,
                  indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", nargs="?", help="checkout A (the baseline)")
    parser.add_argument("b", nargs="?", help="checkout B (A again with --env-b: an env A/B)")
    parser.add_argument("--env-a", help="K=V,... set for A's processes")
    parser.add_argument("--env-b", help="K=V,... set for B's processes")
    parser.add_argument("--net", default="resnet18")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--layers", default="all", help="all, or NAME,PREFIX*,...")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=10, help="timed calls a layer a process")
    parser.add_argument("--stat", choices=STATS, default="min",
                        help="a round's time of a layer: its calls' minimum or median")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--algorithm", default="auto", help="PreparedConv's, where it applies")
    for side in "ab":
        parser.add_argument(f"--layout-{side}", default="model", choices=["model", *LAYOUTS],
                            help=f"{side.upper()}'s int8 convs' layouts (model: as bench_int8)")
    parser.add_argument("--layout", default="model", help=argparse.SUPPRESS)  # a child's
    parser.add_argument("--json", help="also write the per-round times and ratios here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if not args.a or not args.b:
        parser.error("two checkouts, A and B, are needed (the same one twice with --env-b)")
    envs = parse_env(args.env_a, "--env-a"), parse_env(args.env_b, "--env-b")
    with tempfile.TemporaryDirectory(prefix="ab_builds_") as tmp:
        sites = [make_site(path, os.path.join(tmp, side)) for path, side in
                 ((args.a, "a"), (args.b, "b"))]
        times, stat = [[], []], STATS.index(args.stat)
        for r in range(args.rounds):
            for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                times[side].append(run_side((args.a, args.b)[side], sites[side], envs[side],
                                            args, (args.layout_a, args.layout_b)[side]))
            totals = [sum(v[stat] for v in side[-1].values()) for side in times]
            print(f"round {r + 1}/{args.rounds}: total A {totals[0]:.3f} ms, B {totals[1]:.3f} ms",
                  flush=True)
            if args.json:  # rewritten each round: a killed run keeps what it has
                write_json(args, times, compare(*times, stat))
    rows = compare(*times, stat)
    print(f"{args.net} batch {args.batch}, {args.threads} threads, {args.rounds} rounds of "
          f"{args.calls} calls; ms = median over rounds of each round's {args.stat}")
    print(f"{'layer':<28}{'A ms':>10}{'B ms':>10}{'B/A':>8}  range")
    for name, row in rows.items():
        print(f"{name:<28}{row['a_ms']:10.4f}{row['b_ms']:10.4f}{row['ratio']:8.3f}  "
              f"{row['low']:.3f}-{row['high']:.3f}")


if __name__ == "__main__":
    main()
