"""`tianyuan run FILE`: a saved graph (`graph.save`, `tianyuan quantize export.dir=DIR`) run
without the model's code: its latency (median), result and peak memory; `--profile` adds
each step's time and the memory plan: the arena, the sum of all activations, the measured
peak (the rise of the resident set over one run) and the steps that still allocate.

    tianyuan run runs/quantize/export/qat.graph --profile [--batch 16]
    tianyuan run model.graph --input images.npy --output logits.npy

Without --input the graph runs on random data of its traced shape (--batch: of that batch
size, for a graph traced with dynamic_batch=True, as `tianyuan quantize export.dir=` writes
them); a .npy input must have the traced shape (any batch where the graph takes one) and
dtype; an int8 input is taken with the traced scale and zero point.
"""
import argparse

import numpy as np

import tianyuan as ty
from tianyuan.evaluation.report import format_table, write_json
from tianyuan.quantization.qarray import wrap


def _input(spec, path, seed, batch):
    shape, dtype, qparams = spec
    if batch:
        shape = (batch,) + tuple(shape[1:])
    if path:
        array = np.load(path, allow_pickle=False)
    elif dtype.kind == "f":
        array = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    else:
        info = np.iinfo(dtype)
        array = np.random.default_rng(seed).integers(info.min, info.max + 1, shape, dtype)
    return ty.Tensor(array) if qparams is None else wrap(array, *qparams)


def _memory(stats):
    """The memory plan's figures and the measured peak, one row."""
    allocating = ", ".join(f"{kind} x{n}" for kind, n in stats["allocating"].items())
    return {"arena": stats["arena_mb"], "all activations": stats["activations_mb"],
            "peak (RSS rise)": stats["peak_rss_mb"], "in place": stats["inplace"],
            "steps that allocate": allocating or "none"}


def _parser():
    parser = argparse.ArgumentParser(prog="tianyuan run", description=__doc__.split("\n")[0])
    parser.add_argument("file", help="a graph file written by graph.save")
    parser.add_argument("--input", help=".npy input (default: random of the traced shape)")
    parser.add_argument("--output", help="write the result here (.npy)")
    parser.add_argument("--batch", type=int, default=None,
                        help="random input of this batch size (a graph traced for any batch)")
    parser.add_argument("--repeats", type=int, default=20, help="timed runs (median)")
    parser.add_argument("--profile", action="store_true", help="print each step's time")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=None, help="also write the figures here")
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.threads:
        ty.set_num_threads(args.threads)
    graph = ty.runtime.load(args.file)
    if args.input and len(graph.input_specs) != 1:
        raise SystemExit(f"tianyuan run: {args.file} takes {len(graph.input_specs)} inputs; "
                         "--input gives one")
    if args.batch and not graph.dynamic_batch:
        raise SystemExit(f"tianyuan run: {args.file} was traced for batch "
                         f"{graph.input_specs[0][0][0]} only (trace with dynamic_batch=True "
                         "for any)")
    inputs = [_input(spec, args.input, k, args.batch) for k, spec in
              enumerate(graph.input_specs)]
    result = graph(*inputs)
    stats = graph.profile(*inputs, repeats=args.repeats)
    first = result if isinstance(result, ty.Tensor) else result[0]
    summary = {"file": args.file, "inputs": " ".join(f"{x.dtype}{list(x.shape)}"
                                                     for x in inputs),
               "result": f"{first.dtype}{list(first.shape)}", "steps": len(graph.steps),
               "native": sum(s.native for s in graph.steps), "latency_ms": stats["total_ms"],
               "peak_traced_mb": stats["peak_mb"], "threads": ty.get_num_threads(),
               "isa": ty.current_isa()}
    if args.profile:
        print(format_table(stats["rows"], ["step", "name", "type", "how", "shape", "ms",
                                           "share"], title="steps (median ms)"))
        print(format_table([_memory(stats)], title="\nmemory (MiB)"))
    print(format_table([summary], title="\nrun"))
    if args.output:
        np.save(args.output, np.asarray(first.data))
        print(f"written: {args.output}")
    if args.json:
        write_json(args.json, {**summary, "steps_ms": stats["steps_ms"],
                               "memory": _memory(stats), "profile": stats["rows"]})
    return 0
