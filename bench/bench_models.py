"""Whole classification models at 224x224: our fp32 and int8 inference latency and fp32
training images/s, against PyTorch (torchvision models; int8 through
torchvision.models.quantization, x86/fbgemm engine) and ONNX Runtime fp32 and int8 (the
torchvision model exported; int8: `quant_pre_process`, then `quantize_static` to QDQ with
per-channel s8 weights and u8 activations, the format ONNX Runtime's own guide gives for CPUs,
calibrated on the same two random batches as ours), as ratios ours / peer (time: < 1 is
faster; training: images/s ratio, > 1 is faster). Peers are skipped (shown "-") when not
installed or without the architecture. ONNX Runtime's u8 x s8 convolutions on AVX2 CPUs
without VNNI take `vpmaddubsw`, which saturates where two products of full-range weights
pass 2^15: its int8 column is that inexact form there (our int8r, 7-bit weights, is the
exact form of the same speed).

    /root/benchvenv/bin/python bench/bench_models.py --models resnet18,mobilenet_v2 --batches 1
        [--rounds 2]

Latency: median of --repeats runs after a warm-up (evaluation.benchmark for ours, the same
rule for the peers). Our fp32 inference runs the model fused (quantization.fuse with its
fuse_groups: each conv + frozen BN + activation as one convolution), as `tianyuan bench`
does. Int8: post-training calibration on two random batches, then convert (ours:
quantization.calibrate + quantize; PyTorch: prepare + convert; ONNX Runtime: above) - speed
only, the accuracy of int8 is `tianyuan quantize`'s. int8r: ours with 7-bit weights
(calibration_reduce_range_qconfig), which AVX2 CPUs without VNNI convolve on the exact
vpmaddubsw tile with no residual (8-bit weights take it with one, int8_cgemm.h). int8 graph:
the int8 model traced (jit.trace), as deployed: its layers' native calls with no Python
between them (the peers' int8 models run as graphs too). Training:
SGD steps on random data at --train-batch, images/s from the median step.
Peers run in a child process, one framework at a time (torch ships its own OpenMP runtime).
"""
import argparse
import copy
import os
import sys
import tempfile
import time

import numpy as np

from blas_env import in_child, restart_with_blas_threads

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "shufflenet_v2_x1_0", "shufflenet_v1_x1_0_g3"]
SHAPE = (3, 224, 224)


def median_ms(fn, repeats, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def random_batch(batch, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, *SHAPE)).astype(np.float32)


# ------------------------------------------------------------------ ours
def ours(name, batches, repeats, train_batch, train_steps, profile=False):
    import tianyuan as ty
    import tianyuan.functional as F
    from tianyuan import jit, optim, zoo
    from tianyuan import quantization as Q
    from tianyuan.evaluation import benchmark
    model = zoo.get_model(name).eval()
    qconfigs = (("int8", Q.calibration_qconfig), ("int8r", Q.calibration_reduce_range_qconfig))
    int8 = {kind: Q.quantize(Q.calibrate(Q.quantize_qat(model, qconfig),
                                         [random_batch(2, s) for s in range(2)]))
            for kind, qconfig in (qconfigs if batches else ())}
    inference = Q.fuse(copy.deepcopy(model), model.fuse_groups())  # conv + BN + act fused
    out = {}
    for batch in batches:
        out[("fp32", batch)] = benchmark(inference, batch, SHAPE, repeats, 2)["latency_ms"]
        for kind, m in int8.items():
            out[(kind, batch)] = benchmark(m, batch, SHAPE, repeats, 2)["latency_ms"]
        x = ty.tensor(random_batch(batch))
        graph = jit.trace(int8["int8"], x)   # the deployed form: no Python between layers
        out[("int8g", batch)] = median_ms(lambda: graph(x), repeats)
    model.train()
    opt = optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = ty.tensor(random_batch(train_batch))
    y = ty.tensor(np.arange(train_batch) % 1000)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out["train"] = 1000.0 * train_batch / median_ms(step, train_steps, warmup=1)
    if profile:  # one more step, by op (tianyuan.profiler)
        with ty.profiler.profile() as prof:
            step()
        rows = prof.rows()
        out["train_profile"] = rows + [{"op": "(outside ops)", "total_ms": round(
            prof.outside_ms, 3), "share": round(prof.outside_ms / prof.wall_ms, 4)}]
    return out


# ------------------------------------------------------------------ peers
def torch_int8_model(name, torch):
    """torchvision's quantizable twin, fused, calibrated, converted; None if it has none."""
    try:
        from torchvision.models import quantization as tvq
    except ImportError:
        return None
    builder = getattr(tvq, name, None)
    if builder is None:
        return None
    engines = torch.backends.quantized.supported_engines
    engine = "x86" if "x86" in engines else "fbgemm"
    torch.backends.quantized.engine = engine
    model = builder(weights=None, quantize=False).eval()
    model.fuse_model()
    model.qconfig = torch.ao.quantization.get_default_qconfig(engine)
    torch.ao.quantization.prepare(model, inplace=True)
    with torch.inference_mode():
        for seed in range(2):
            model(torch.from_numpy(random_batch(2, seed)))
    return torch.ao.quantization.convert(model)


def ort_models(model, torch):
    """(fp32 path, int8 path) of ONNX files for the torchvision model; None where the runtime,
    the exporter or the quantization tool is missing."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None, None
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "model.onnx")
    try:
        torch.onnx.export(model, torch.from_numpy(random_batch(1)), path, input_names=["x"],
                          dynamic_axes={"x": {0: "n"}}, dynamo=False)
    except Exception as error:  # torch's exporter needs the onnx package besides onnxruntime
        print(f"ONNX Runtime columns skipped: export failed ({type(error).__name__}: {error}); "
              "pip install onnx", file=sys.stderr)
        return None, None
    try:
        return path, ort_quantized(path, folder)
    except Exception as error:
        print(f"ONNX Runtime int8 column skipped: quantization failed "
              f"({type(error).__name__}: {error})", file=sys.stderr)
        return path, None


def ort_session(path, threads):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def ort_quantized(path, folder):
    """The fp32 ONNX model at `path` as QDQ int8 (path of the new file): shape inference and
    graph optimisation first (without them the exporter's folded biases are not initializers
    and the convolutions stay float: slower than fp32), then static quantization."""
    import logging

    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    logging.getLogger().setLevel(logging.ERROR)   # the tool logs a line per tensor

    class Batches(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": random_batch(2, seed)} for seed in range(2)])

        def get_next(self):
            return next(self.feeds, None)
    prepared, quantized = (os.path.join(folder, f) for f in ("prepared.onnx", "int8.onnx"))
    quant_pre_process(path, prepared)
    quantize_static(prepared, quantized, Batches(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return quantized


def peers(name, batches, repeats, train_batch, train_steps, threads):
    """{(kind, batch): ms, "train": images/s} of torch fp32/int8 and ORT fp32/int8 (missing:
    absent)."""
    try:
        import torch
        import torchvision
    except ImportError:
        return {}
    torch.set_num_threads(threads)
    builder = getattr(torchvision.models, name, None)
    if builder is None:
        return {}
    model = builder(weights=None).eval()
    int8 = torch_int8_model(name, torch) if batches else None
    out = {}
    with torch.inference_mode():
        for batch in batches:
            x = torch.from_numpy(random_batch(batch))
            out[("torch_fp32", batch)] = median_ms(lambda: model(x), repeats)
            if int8 is not None:
                out[("torch_int8", batch)] = median_ms(lambda: int8(x), repeats)
    # one ONNX Runtime session alive at a time: the idle one's spinning workers had slowed
    # the other's batch-1 runs by up to 1.35x
    for kind, path in zip(("ort_fp32", "ort_int8"),
                          ort_models(model, torch) if batches else (None, None)):
        if path is None:
            continue
        session = ort_session(path, threads)
        for batch in batches:
            feed = {"x": random_batch(batch)}
            out[(kind, batch)] = median_ms(lambda: session.run(None, feed), repeats)
        del session
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.from_numpy(random_batch(train_batch)), torch.arange(train_batch) % 1000

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out["train"] = 1000.0 * train_batch / median_ms(step, train_steps, warmup=1)
    return out


def median_over_rounds(runs):
    """{key: median over the runs that have it} of a list of {key: number} dicts."""
    keys = {k for run in runs for k in run}
    return {k: float(np.median([run[k] for run in runs if k in run])) for k in keys}


# ------------------------------------------------------------------ table
def rows_for(name, batches, mine, peer):
    def ratio(a, b):
        return round(a / b, 2) if a and b else "-"
    rows = [] if batches else [{"model": name}]
    for batch in batches:
        f, q, qr = mine[("fp32", batch)], mine[("int8", batch)], mine[("int8r", batch)]
        qg = mine[("int8g", batch)]
        tf, tq, of, oq = (peer.get((k, batch)) for k in ("torch_fp32", "torch_int8",
                                                          "ort_fp32", "ort_int8"))
        rows.append({"model": name, "batch": batch, "fp32_ms": round(f, 2),
                     "torch_fp32_ms": round(tf, 2) if tf else "-", "vs_torch": ratio(f, tf),
                     "ort_fp32_ms": round(of, 2) if of else "-", "vs_ort": ratio(f, of),
                     "int8_ms": round(q, 2), "torch_int8_ms": round(tq, 2) if tq else "-",
                     "int8_vs_torch": ratio(q, tq),
                     "ort_int8_ms": round(oq, 2) if oq else "-", "int8_vs_ort": ratio(q, oq),
                     "int8_vs_our_fp32": ratio(q, f),
                     "int8_graph_ms": round(qg, 2), "graph_vs_torch": ratio(qg, tq),
                     "graph_vs_ort": ratio(qg, oq),
                     "int8r_ms": round(qr, 2), "int8r_vs_torch": ratio(qr, tq),
                     "int8r_vs_ort": ratio(qr, oq)})
    rows[0].update({"train_img_s": round(mine["train"], 1),
                    "torch_train_img_s": round(peer["train"], 1) if "train" in peer else "-",
                    "train_vs_torch": ratio(mine["train"], peer.get("train"))})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,16",
                        help="inference batch sizes; '' for the training step alone")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--train-batch", type=int, default=8)
    parser.add_argument("--train-steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    # 3: the median of 3 alternating rounds survives one slow spell (see bench_int8.py)
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternate ours and the peers this many times per model")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--profile", action="store_true",
                        help="print one of our training steps by op (tianyuan.profiler)")
    args = parser.parse_args()
    restart_with_blas_threads(args.threads)
    import tianyuan as ty
    from tianyuan.evaluation.report import format_table, write_json
    ty.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",") if b]
    rows, profiles = [], {}
    for name in args.models.split(","):
        # ours and the peers alternate `rounds` times (a slow spell of a shared machine hits
        # both sides); each figure is the median over the rounds
        mine_runs, peer_runs = [], []
        for _ in range(args.rounds):
            mine_runs.append(ours(name, batches, args.repeats, args.train_batch,
                                  args.train_steps, args.profile))
            profile = mine_runs[-1].pop("train_profile", None)
            peer_runs.append(in_child(peers, name, batches, args.repeats, args.train_batch,
                                      args.train_steps, args.threads))
        mine, peer = median_over_rounds(mine_runs), median_over_rounds(peer_runs)
        rows += rows_for(name, batches, mine, peer)
        print(format_table(rows[-max(1, len(batches)):]), flush=True)
        if profile:
            print(format_table(profile, title=f"{name}: one training step at batch "
                               f"{args.train_batch} by op (the last round)"), flush=True)
            profiles[name] = profile
    print(format_table(rows, title=f"\nmodels at 224x224, {args.threads} threads, ISA "
                       f"{ty.current_isa()}; ms = median latency; vs_* = our time / peer time; "
                       "train_vs_torch = our images/s / torch's"))
    if args.json:
        write_json(args.json, {"rows": rows, "train_profiles": profiles} if args.profile
                   else rows)


if __name__ == "__main__":
    main()
