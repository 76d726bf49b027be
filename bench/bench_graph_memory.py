"""Peak memory of one inference: our saved graph (tianyuan.runtime.load; its memory plan's
in-place steps) against an ONNX Runtime session and PyTorch eager under no_grad, for
ResNet-50, MobileNetV2 and ShuffleNetV2 x1.0, fp32 and int8, batch 1 and 16 at 224 x 224.

    .venv/bin/python bench/bench_graph_memory.py --peer-python /work/torchvenv/bin/python
        [--models resnet50] [--batches 1,16] [--threads 2]

Each figure is measured in a fresh child process: the resident set's high-water mark over
the first call (VmHWM, reset through /proc/self/clear_refs once the model is loaded, the
input made and the C heap trimmed) less the resident set after loading, in MiB; the ratio is
ours / peer (< 1: we take less). Also printed: our plan's arena and the sum of all
activations (the graph's profile, at that batch). Our graphs: the zoo model (random weights;
int8: calibrated on two random batches) fused (fp32) or quantized, traced at the batch it
runs and saved. ONNX Runtime: the torchvision model exported (fp32), or quantized as
bench_models.py does (QDQ, per-channel s8 weights, u8 activations), default session options
(its arena and memory patterns on). PyTorch: torchvision's model (int8: its quantizable
twin, x86 engine), eager under no_grad. The peers run with the peer Python (torch,
torchvision, onnxruntime, onnx installed); a missing peer is shown "-".
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
MODELS = {"resnet50": "resnet50", "mobilenet_v2": "mobilenet_v2",
          "shufflenet_v2_x1_0": "shufflenet_v2_x1_0"}
SHAPE = (3, 224, 224)


def random_batch(batch, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, *SHAPE)).astype(np.float32)


# ------------------------------------------------------------------ in a child: one figure

def _status(key):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(key)


def measure(run):
    """MiB the resident set rose over run() above where it stood before, after the C heap
    gave back what loading freed (malloc_trim: our load's trial run, as `import tianyuan`
    keeps freed blocks, would otherwise have left the heap warm for the first call)."""
    import ctypes
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before = _status("VmRSS")
    run()
    return (_status("VmHWM") - before) / 2 ** 20


def child_ours(path, batch):
    import tianyuan as ty
    from tianyuan.jit.profile import memory_figures
    graph = ty.runtime.load(path)
    x = ty.Tensor(random_batch(batch, 1))
    peak = measure(lambda: graph(x))
    figures = memory_figures(graph, [x])
    return {"peak": peak, "arena": figures["arena_mb"],
            "activations": figures["activations_mb"]}


def child_ort(path, batch, threads):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    x = random_batch(batch, 1)
    return {"peak": measure(lambda: session.run(None, {"x": x}))}


def child_torch(name, precision, batch, threads):
    import torch
    torch.set_num_threads(threads)
    from bench_models import torch_int8_model
    if precision == "int8":
        model = torch_int8_model(name, torch)
    else:
        import torchvision
        model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.from_numpy(random_batch(batch, 1))

    def run():
        with torch.no_grad():
            model(x)
    return {"peak": measure(run)}


# ------------------------------------------------------------------ the files

def save_ours(name, precision, batch, folder):
    import copy

    import tianyuan as ty
    from tianyuan import jit, zoo
    from tianyuan import quantization as Q
    ty.manual_seed(0)
    model = zoo.get_model(name).eval()
    if precision == "int8":
        model = Q.quantize(Q.calibrate(Q.quantize_qat(model),
                                       [random_batch(2, s) for s in range(2)]))
    else:
        model = Q.fuse(copy.deepcopy(model), model.fuse_groups()).eval()
    path = os.path.join(folder, f"{name}.{precision}.b{batch}.graph")
    jit.trace(model, ty.Tensor(random_batch(batch))).save(path)   # its plan: for this batch
    return path


def export_ort(name, folder):
    """(fp32, int8) ONNX files of the torchvision model, in the peer Python."""
    import torch
    import torchvision
    from bench_models import ort_quantized
    model = getattr(torchvision.models, name)(weights=None).eval()
    path = os.path.join(folder, f"{name}.onnx")
    torch.onnx.export(model, torch.from_numpy(random_batch(1)), path, input_names=["x"],
                      dynamic_axes={"x": {0: "n"}}, dynamo=False)
    sub = os.path.join(folder, name)
    os.makedirs(sub, exist_ok=True)
    return {"fp32": path, "int8": ort_quantized(path, sub)}


# ------------------------------------------------------------------ the driver

def call(python, *args):
    """json result of this script run as a child with args, or None where it failed."""
    env = dict(os.environ)
    proc = subprocess.run([python, __file__, "--child", *map(str, args)], capture_output=True,
                          text=True, env=env)
    if proc.returncode:
        print(f"  child {args[:3]} failed: {proc.stderr.strip().splitlines()[-1:]}",
              file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_child(argv):
    kind, rest = argv[0], argv[1:]
    if kind == "ours":
        out = child_ours(rest[0], int(rest[1]))
    elif kind == "ort":
        out = child_ort(rest[0], int(rest[1]), int(rest[2]))
    elif kind == "torch":
        out = child_torch(rest[0], rest[1], int(rest[2]), int(rest[3]))
    elif kind == "export":
        out = export_ort(rest[0], rest[1])
    else:
        raise SystemExit(f"unknown child {kind}")
    print(json.dumps(out))


def _ratio(ours, peer):
    return "-" if ours is None or peer is None else f"{ours['peak'] / peer['peak']:.2f}"


def _mb(figure):
    return "-" if figure is None else f"{figure['peak']:.1f}"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return run_child(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer-python", default="/work/torchvenv/bin/python")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="graph_memory_")
    rows = []
    for name in args.models.split(","):
        onnx = call(args.peer_python, "export", name, folder) or {}
        for precision in args.precisions.split(","):
            for batch in map(int, args.batches.split(",")):
                path = save_ours(name, precision, batch, folder)
                ours = call(sys.executable, "ours", path, batch)
                ort = (call(args.peer_python, "ort", onnx[precision], batch, args.threads)
                       if precision in onnx else None)
                torch = call(args.peer_python, "torch", name, precision, batch, args.threads)
                plan = ours or {"arena": float("nan"), "activations": float("nan")}
                rows.append(f"| {name} | {precision} | {batch} | "
                            f"{plan['arena']:.1f} | {plan['activations']:.1f} | "
                            f"{_mb(ours)} | {_mb(ort)} | {_mb(torch)} | "
                            f"{_ratio(ours, ort)} | {_ratio(ours, torch)} |")
                print(rows[-1], flush=True)
    print("\n| model | precision | batch | arena MiB | all activations MiB | ours peak MiB | "
          "ORT peak MiB | PyTorch peak MiB | ours / ORT | ours / PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
