"""The peers' side of bench_int8.py and the timing both sides share: PyTorch's int8 conv and
ONNX Runtime's QDQ conv for a layer (each a column of bench_int8's tables, skipped when the
package is missing), the layers' inputs and the timing of a call. The peers run in a child
process (`peer_rows`, one per network and batch) started without the policies
`import tianyuan` sets: in one process, leftover peer threads had made our kernels up to 4x
slower for the next network.
"""
import json
import os
import tempfile
import time
import types
import warnings

import numpy as np

from blas_env import without_our_env
import tianyuan as ty
from tianyuan.quantization import reference as R

STAT = {"median": np.median, "min": np.min}


def median_ms(fn, repeat, stat="median"):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * float(STAT[stat](times))


def torch_int8(conv, x_f32):
    """PyTorch quantized Conv2d (x86 engine, else fbgemm) or None."""
    try:
        import torch
        torch.set_num_threads(ty.get_num_threads())   # same thread count for every column
        warnings.filterwarnings("ignore", message=".*quantize_per.*deprecated",
                                category=UserWarning)
        engines = torch.backends.quantized.supported_engines
        torch.backends.quantized.engine = "x86" if "x86" in engines else "fbgemm"
        q = torch.ao.nn.quantized.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size,
                                         conv.stride, conv.padding, conv.dilation, conv.groups)
        w = torch.from_numpy(conv.weight.data.copy())
        scales = torch.from_numpy(np.maximum(np.abs(conv.weight.data).reshape(
            w.shape[0], -1).max(1) / 127, 1e-8).astype(np.float64))
        q.set_weight_bias(torch.quantize_per_channel(w, scales, torch.zeros(w.shape[0],
                          dtype=torch.long), 0, torch.qint8), None)
        q.scale, q.zero_point = 0.05, 0
        # channels-last, as in a quantized model past its first conv (fbgemm's layout: an
        # NCHW input is converted per call, 3.5x a depthwise layer's own time)
        x = torch.quantize_per_tensor(torch.from_numpy(x_f32), 0.02, 128, torch.quint8)
        x = x.contiguous(memory_format=torch.channels_last)
        return lambda: q(x)
    except ImportError:
        return None


def ort_int8_ms(conv, x_u8, repeat, stat="median"):
    """ONNX Runtime's time for the conv itself, ms, or None: a session of a QDQ conv
    (DequantizeLinear -> Conv -> QuantizeLinear, which ORT fuses into its QLinearConv), run
    with ORT's profiler, and the `stat` of the QLinearConv node's kernel times over `repeat`
    runs after a warm-up. Not the session's wall time: a one-conv graph also runs the two
    layout transposes ORT's NHWC int8 kernels need at a graph's ends (in a whole model only
    at its input and output; here up to twice the conv's own time, on depthwise layers) and
    session.run's ~10 us."""
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    w = conv.weight.data
    scale = np.maximum(np.abs(w).reshape(w.shape[0], -1).max(1) / 127, 1e-8).astype(np.float32)
    inits = [numpy_helper.from_array(R.quantize(w, scale, 0, np.int8, axis=0), "wq"),
             numpy_helper.from_array(scale, "ws"),
             numpy_helper.from_array(np.zeros(w.shape[0], np.int8), "wz"),
             numpy_helper.from_array(np.float32(0.02), "xs"),
             numpy_helper.from_array(np.uint8(128), "xz"),
             numpy_helper.from_array(np.float32(0.05), "ys"),
             numpy_helper.from_array(np.uint8(0), "yz")]
    ph, pw = conv.padding
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("Conv", ["xf", "wf"], ["yf"], strides=list(conv.stride),
                              pads=[ph, pw, ph, pw], dilations=list(conv.dilation),
                              group=conv.groups),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_conv",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, x_u8.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7   # opset 13's IR: a newer onnx writes one an older runtime refuses
    options = ort.SessionOptions()
    options.intra_op_num_threads = ty.get_num_threads()
    options.enable_profiling = True
    folder = tempfile.mkdtemp()
    options.profile_file_prefix = os.path.join(folder, "ort")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    for _ in range(repeat + 1):
        session.run(None, {"x": x_u8})
    path = session.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    os.rmdir(folder)
    times = [e["dur"] / 1000 for e in events if e.get("cat") == "Node" and
             e["name"].endswith("_kernel_time") and "Conv" in e["args"].get("op_name", "")]
    if len(times) != repeat + 1:
        raise RuntimeError(f"ONNX Runtime's profile has {len(times)} conv kernel times for "
                           f"{repeat + 1} runs: the QDQ conv was not fused into one node")
    return float(STAT[stat](times[1:]))


def layer_inputs(shape, batch):
    rng = np.random.default_rng(0)
    x_u8 = rng.integers(0, 256, (batch,) + tuple(shape[1:]), dtype=np.uint8)
    return x_u8, R.dequantize(x_u8, 0.02, 128)


def conv_spec(conv):
    """What the peers need of a conv, picklable for the child."""
    return types.SimpleNamespace(
        weight=types.SimpleNamespace(data=np.array(conv.weight.data)),
        in_channels=conv.in_channels, out_channels=conv.out_channels,
        kernel_size=conv.kernel_size, stride=conv.stride, padding=conv.padding,
        dilation=conv.dilation, groups=conv.groups)


def peer_rows(specs, batch, repeat, stat, threads):
    """In the child: [{"torch": ms, "ort": ms}] (missing peers absent) per layer."""
    ty.set_num_threads(threads)
    with without_our_env():  # PyTorch's OpenMP reads the environment once, when loaded
        try:
            import torch  # noqa: F401
        except ImportError:
            pass
    rows = [{} for _ in specs]
    for (conv, shape), row in zip(specs, rows):
        x_u8, x_f32 = layer_inputs(shape, batch)
        fn = torch_int8(conv, x_f32)
        if fn is not None:
            row["torch"] = median_ms(fn, repeat, stat)
    for (conv, shape), row in zip(specs, rows):
        ms = ort_int8_ms(conv, layer_inputs(shape, batch)[0], repeat, stat)
        if ms is not None:
            row["ort"] = ms
    return rows
