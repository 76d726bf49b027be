"""`make demo`: the whole journey through the zoo and the `tianyuan` command line.

1. `tianyuan train experiment=shapesnet_shapes`: the zoo's ShapesNet on 4000 generated
   32x32 shapes of 10 classes (written once as an image folder), the shared trainer;
2. `tianyuan eval`: top-1/top-5 on the 1000 validation images;
3. `tianyuan quantize experiment=shapesnet_shapes_qat method=both`: int8 by post-training
   calibration (PTQ) and by a one-epoch quantization-aware fine-tune (QAT), with the
   QuantReport (accuracy, drop, latency at batch 1 and 16, size, per-layer SQNR), each
   int8 model also traced and saved as a graph file (`export.dir`);
4. `tianyuan run demo_out/export/qat.graph`: the QAT int8 graph run without the model's
   code, as deployed;
5. a summary of float / PTQ / QAT and the deployed graph, also in demo_out/demo.json.

    python -m tianyuan.trainers.demo [--out demo_out] [--quiet]
"""
import argparse
import json
import os
import time

from tianyuan.evaluation.report import format_table, write_json
from tianyuan.trainers import cli

SUMMARY = ["model", "precision", "top1", "drop", "ms_batch1", "ms_batch16", "size_kb",
           "output_sqnr_db"]


def command(args, timings):
    """Run one `tianyuan ...` command (echoed), failing loudly; records its wall time."""
    print(f"\n$ tianyuan {' '.join(args)}", flush=True)
    started = time.time()
    status = cli.main(args)
    if status != 0:
        raise SystemExit(f"demo: 'tianyuan {args[0]}' exited with status {status}")
    timings[args[0]] = round(time.time() - started, 1)


def journey(out, progress=True):
    """Train, evaluate, quantize; returns the demo's result dict."""
    data = [f"data.root={out}/shapes"]
    weights = f"{out}/train/model_final.safetensors"
    bar = [f"trainer.progress={str(progress).lower()}"]
    timings = {}
    command(["train", "experiment=shapesnet_shapes", *data, f"out_dir={out}/train", *bar],
            timings)
    command(["eval", "model=shapesnet", "data=shapes", *data, f"weights={weights}",
             f"out={out}/eval.json", f"progress={str(progress).lower()}"], timings)
    command(["quantize", "experiment=shapesnet_shapes_qat", *data, f"weights={weights}",
             "method=both", f"out_dir={out}/qat", f"out={out}/quant.json",
             f"export.dir={out}/export", *bar], timings)
    command(["run", f"{out}/export/qat.graph", "--json", f"{out}/run.json"], timings)
    with open(f"{out}/eval.json") as handle:
        evaluated = json.load(handle)
    with open(f"{out}/quant.json") as handle:
        report = json.load(handle)
    with open(f"{out}/run.json") as handle:
        deployed = json.load(handle)
    return {"model": "shapesnet", "eval": {k: evaluated[k] for k in ("top1", "top5", "images")},
            "rows": report["rows"], "worst_layers": report["worst_layers"],
            "deployed": {k: deployed[k] for k in ("file", "latency_ms", "steps", "native")},
            "seconds": timings}


def summary(result):
    rows = {row["model"]: row for row in result["rows"]}
    float_, qat = rows["float"], rows["qat"]
    phases = ", ".join(f"{k} {v:.1f}s" for k, v in result["seconds"].items() if k != "total")
    lines = [format_table(result["rows"], SUMMARY, title="\nfloat vs int8 (top1 %, drop in "
                          "points, median ms, KiB, dB)"),
             f"int8 (QAT) vs float: {float_['ms_batch1'] / qat['ms_batch1']:.2f}x at batch 1, "
             f"{float_['ms_batch16'] / qat['ms_batch16']:.2f}x at batch 16, "
             f"{float_['size_kb'] / qat['size_kb']:.1f}x smaller"
             + (" (timing noisy: another process was using the CPU)"
                if float_.get("noisy") or qat.get("noisy") else ""),
             f"deployed: {result['deployed']['file']} (batch 1) "
             f"{result['deployed']['latency_ms']:.3f} ms, {result['deployed']['native']} of "
             f"{result['deployed']['steps']} steps native; module by module "
             f"{qat['ms_batch1']:.3f} ms",
             f"wall time {result['seconds']['total']:.1f}s ({phases})"]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_out")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    started = time.time()
    os.makedirs(args.out, exist_ok=True)
    result = journey(args.out, progress=not args.quiet)
    result["seconds"]["total"] = round(time.time() - started, 1)
    write_json(os.path.join(args.out, "demo.json"), result)
    print(summary(result))
    print(f"\nweights: {args.out}/train/model_final.safetensors   "
          f"results: {args.out}/demo.json, {args.out}/quant.json")
    return result


if __name__ == "__main__":
    main()
