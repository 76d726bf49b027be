"""Memory of `tianyuan quantize`'s phases on a zoo model with random data: the process's
resident set (current and peak) after each phase, and with --trace the phase's peak of
numpy's allocations (tracemalloc; slower).

    .venv/bin/python bench/mem_quantize.py --model resnet18 --size 224 --batch 16 \\
        --calib 4 --images 32

Phases as trainers/quantize.py runs them: build, PTQ (prepare_qat + calibrate + quantize),
then QuantReport.measure's: timing at batch 1 and `--batch`, evaluate, per-layer SQNR on
`--images` images. The evaluation is a forward over `--calib` batches (no dataset needed).
"""
import argparse
import resource
import time
import tracemalloc

import numpy as np

import tianyuan as ty
from tianyuan import zoo
from tianyuan.evaluation.benchmark import compare_latency
from tianyuan.evaluation.quant_report import sensitivity
from tianyuan.trainers.quantize import ptq


def rss_mb():
    """(current, peak) resident set in MB (Linux: /proc/self/status)."""
    with open("/proc/self/status") as f:
        now = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
    return now / 1024.0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Phases:
    def __init__(self, trace):
        self.trace, self.started = trace, time.perf_counter()
        if trace:
            tracemalloc.start()

    def mark(self, name):
        now, peak = rss_mb()
        line = f"{name:<28} rss {now:7.0f} MB  peak {peak:7.0f} MB"
        if self.trace:
            line += f"  traced peak {tracemalloc.get_traced_memory()[1] / 2 ** 20:7.0f} MB"
            tracemalloc.reset_peak()
        print(f"{line}  ({time.perf_counter() - self.started:.0f} s)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--calib", type=int, default=4, help="calibration batches")
    parser.add_argument("--images", type=int, default=32, help="per-layer SQNR images")
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args()
    phases = Phases(args.trace)
    rng = np.random.default_rng(0)
    shape = (args.batch, 3, args.size, args.size)
    batches = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.calib)]
    model = zoo.get_model(args.model).eval()
    phases.mark("build + data")
    int8 = ptq(model, iter(batches))
    phases.mark("ptq (calibrate, quantize)")

    def evaluate(m):
        with ty.no_grad():
            for x in batches:
                m(ty.tensor(x))
        return {"top1": 0.0}
    example = rng.standard_normal((args.images, 3, args.size, args.size)).astype(np.float32)
    for batch in (1, args.batch):     # QuantReport.measure's phases, one at a time
        compare_latency({"float": model, "ptq": int8}, batch, shape[1:], 2, 1)
    phases.mark("time float and int8")
    evaluate(model)
    evaluate(int8)
    phases.mark("evaluate")
    sensitivity(model, int8, ty.tensor(example))
    phases.mark("per-layer SQNR")


if __name__ == "__main__":
    main()
