"""Every convolution of ResNet-18, MobileNetV2 and ShuffleNetV2 (x1.0) at 224x224: our int8
conv (weights packed once) vs our float32 conv, and vs PyTorch's int8 conv (x86/fbgemm
engine) and ONNX Runtime's QDQ int8 conv when those are installed (columns skipped
otherwise). Prints per-layer milliseconds, totals per network and achieved TOP/s, the
latter also as a share of the peak of the instruction the chosen path's tile runs on,
measured in the run (before and after each network; the largest so far): vpdpbusd on zmm on
`vnni`, and TDPBUSD too on `amx`; vpdpbusd on ymm on `avxvnni`; the exact AVX2 form's
vpmaddwd + vpaddd, the AVX2 split tile's ceiling, on `avx2` and `avx512`;
each network's ratios are marked against the targets (int8 <= 0.4x our float32 time and
<= 1.0x the faster peer's).

Layers are found by running the zoo model once with forward hooks on its Conv2d modules.
Ours runs in this process, the peers (int8_peers.py) in a child process per network and batch;
the two alternate --rounds times, so that a slow spell of the shared machine hits both, and a
layer's time is the median over the rounds of its per-round times. Time = median (or
--stat min) of --repeat runs after a warm-up; TOP/s = 2 * MACs / time. --json PATH also
writes every layer's times and the totals. Ours runs as the int8 modules do: a `PreparedConv`
made once (per input scale), one native call per conv, NCHW in and out, or channels-last where
the int8 model carries that layout (`quantization.carries_channels_last`: every conv of groups
1 and 64 output channels or more, on the vnni and amx ISAs: `kernels.channels_last_wins`; ResNet there;
the report says which): its first conv reads the QuantStub's NCHW and writes channels-last, the
others read and write channels-last.
PyTorch: torch.ao.nn.quantized.Conv2d, per-channel qint8 weights, quint8 activations in the
channels-last layout its quantized models carry between layers. ONNX Runtime: a one-conv QDQ
model (DequantizeLinear -> Conv -> QuantizeLinear) built with the `onnx` helper, which ORT
fuses into its QLinearConv, timed by ORT's own profiler as that node's kernel time (without
the two layout transposes a one-conv graph adds around its NHWC kernel and session.run's
cost: until 2026-12-05 this column was the session's wall time, up to 3.7x the conv's on
depthwise layers); the column is skipped when `onnx` or `onnxruntime` is missing. For whole
models against both peers' int8, see bench_models.py.
--algorithm NAME adds ours with that conv algorithm forced where a layer takes it (column
int8a; the automatic choice elsewhere). --reduce-range adds ours with weights on the 7-bit
grid (`reduce_range_qconfig`; column int8r): AVX2 CPUs without VNNI run both on the exact
vpmaddubsw tile, 8-bit weights with a sparse residual for the byte pairs past its bound
(int8_cgemm.h, NarrowWeights), 7-bit ones with none; the peers' kernels do not depend on the
weights' range. The weights are the zoo models' random initialisation quantized per channel:
Kaiming-normal for ResNet and MobileNetV2 (3-9 % of 3x3 quads in the residual), PyTorch's
default uniform for ShuffleNetV2 (72-82 %: its 8-bit convolutions run the split tile).

    python bench/bench_int8.py [--nets resnet18,...] [--batches 1,16] [--repeat 5]
                               [--rounds 3] [--stat min] [--threads N] [--layers]
                               [--reduce-range] [--algorithm amx] [--json results.json]
"""
import argparse
import json

import numpy as np

from blas_env import in_child, restart_with_blas_threads
from int8_peers import STAT, conv_spec, layer_inputs, median_ms, peer_rows
import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn, zoo
from tianyuan import quantization as Q
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R

NETWORKS = ["resnet18", "mobilenet_v2", "shufflenet_v2_x1_0"]  # the default; or any of EXTRA
EXTRA = ["resnet50", "shufflenet_v1_x1_0_g3"]


def conv_layers(name):
    """[(layer name, Conv2d, input shape (1, C, H, W))] in forward order, at 224x224."""
    model, found = zoo.get_model(name).eval(), []
    for lname, m in model.named_modules():
        if isinstance(m, nn.Conv2d):
            m.register_forward_hook(lambda mod, a, o, n=lname: found.append((n, mod, a[0].shape)))
    with ty.no_grad():
        model(ty.zeros(1, 3, 224, 224))
    return found


def networks_and_batches(parser, nets, batches):
    """(name, layers, batch) for each network of `nets` (checked, else a parser error) and
    each batch size of `batches` (comma-separated, as --nets and --batches give them)."""
    for net in nets.split(","):
        if net not in NETWORKS + EXTRA:
            parser.error(f"--nets: unknown network {net!r}; expected some of "
                         f"{', '.join(NETWORKS + EXTRA)}")
        layers = conv_layers(net)
        for batch in (int(b) for b in batches.split(",")):
            yield net, layers, batch


def layer_macs(conv, shape, batch):
    """Multiply-adds of one layer at `batch` images of shape (1, C, H, W)."""
    out = F.conv2d(ty.tensor(np.zeros((1,) + tuple(shape[1:]), np.float32)), conv.weight,
                   None, conv.stride, conv.padding, conv.dilation, conv.groups)
    return batch * out.data[0].size * conv.weight.data[0].size


# Our int8 conv's layouts: NCHW in and out; channels-last in and out; NCHW in, channels-last out
# (the first conv of a model that carries channels-last: its input is the QuantStub's).
LAYOUTS = ("nchw", "channels_last", "to_channels_last")


def ours(conv, x_u8, x_f32, weight_bits=8, algorithm="auto", layout="nchw"):
    """(int8 fn, float32 fn) for one layer, weights quantized (on the grid of weight_bits: 8,
    or 7 as reduce_range gives) and packed outside the timing; algorithm: PreparedConv's,
    the automatic choice where the layer cannot take it; layout: one of LAYOUTS (the input
    made outside the timing)."""
    if layout == "channels_last":
        x_u8 = K.to_channels_last(x_u8)
    w = conv.weight.data
    top = 2 ** (weight_bits - 1) - 1
    scale = np.maximum(np.abs(w).reshape(w.shape[0], -1).max(1) / top, 1e-8)
    packed = K.pack_weights(R.quantize(w, scale, 0, np.int8, axis=0), conv.groups)
    mult, shift = R.quantize_multiplier(0.02 * scale / 0.05)
    bias = np.zeros(w.shape[0], np.int32)
    ph, pw = conv.padding
    def prepare(algo):
        return K.PreparedConv(packed, bias, mult, shift, 0, True, np.uint8, conv.stride,
                              (ph, ph, pw, pw), conv.dilation, algorithm=algo)
    prepared = prepare(algorithm)
    if algorithm != "auto":
        try:
            prepared(x_u8, 128)   # a forced algorithm the layer cannot take raises here
        except ValueError:        # e.g. amx: C not a multiple of 64
            prepared = prepare("auto")
    int8 = lambda: prepared(x_u8, 128)
    if layout == "to_channels_last":
        int8 = lambda: prepared.channels_last(x_u8, 128)
    xf = ty.tensor(x_f32)
    f32 = lambda: F.conv2d(xf, conv.weight, conv.bias, conv.stride, conv.padding,
                           conv.dilation, conv.groups)
    return int8, f32


def our_layouts(layers):
    """Each layer's in LAYOUTS as the network's int8 model runs it: where it carries
    channels-last, the first conv (reading the QuantStub's NCHW) writes it, the others read
    and write it."""
    if not (K.channels_last_wins() and Q.carries_channels_last([c for _, c, _ in layers])):
        return ["nchw"] * len(layers)
    return ["to_channels_last"] + ["channels_last"] * (len(layers) - 1)


def bench_net(layers, batch, repeat, stat, rounds, reduce_range=False, algorithm=None,
              layouts=None):
    """[(name, {col: ms, "macs": n})] for every layer, each time the median over rounds;
    reduce_range: also ours with 7-bit weights ("int8r"); algorithm: also ours with that
    algorithm forced where a layer takes it ("int8a"); layouts: our int8 convs', a layer each
    (default NCHW)."""
    layouts = layouts or ["nchw"] * len(layers)
    specs = [(conv_spec(conv), shape) for _, conv, shape in layers]
    runs = []
    for _ in range(rounds):
        mine = []
        for (name, conv, shape), layout in zip(layers, layouts):
            x_u8, x_f32 = layer_inputs(shape, batch)
            int8, f32 = ours(conv, x_u8, x_f32, layout=layout)
            mine.append({"int8": median_ms(int8, repeat, stat),
                         "f32": median_ms(f32, repeat, stat)})
            if reduce_range:
                mine[-1]["int8r"] = median_ms(ours(conv, x_u8, x_f32, 7, layout=layout)[0],
                                              repeat, stat)
            if algorithm:
                mine[-1]["int8a"] = median_ms(ours(conv, x_u8, x_f32, 8, algorithm, layout)[0],
                                              repeat, stat)
        peers = in_child(peer_rows, specs, batch, repeat, stat, ty.get_num_threads())
        runs.append([dict(m, **p) for m, p in zip(mine, peers)])
    rows = []
    for i, (name, conv, shape) in enumerate(layers):
        row = {c: float(np.median([run[i][c] for run in runs])) for c in runs[0][i]}
        row["macs"] = layer_macs(conv, shape, batch)
        rows.append((name, row))
    return rows


TARGET_VS_F32, TARGET_VS_PEER = 0.4, 1.0   # the totals per network


def _target(ratio, target):
    return f"{'meets' if ratio <= target else 'misses'} <= {target}"


def measured_peaks(seen):
    """{name: TOP/s}: the peak of the instruction that the chosen path's int8 tile runs on
    (`TIANYUAN_ISA` may choose a lower path than the CPU's best), measured now on every
    thread by a register-only loop: vpdpbusd on zmm for `vnni`, and TDPBUSD too for `amx`;
    vpdpbusd on ymm for `avxvnni`; the exact AVX2 form (vpmaddwd + vpaddd) for `avx2` and
    `avx512` (AVX-512 without VNNI runs the AVX2 tile). Each is the largest of this and the
    earlier measurements in `seen` (a slow spell of the shared machine lowers a measurement,
    nothing raises one); {} on the generic path."""
    isa = ty.current_isa()
    if isa in ("vnni", "amx"):
        now = {"VNNI": K.vnni_peak() / 1e12}
        if isa == "amx":
            now["AMX"] = K.amx_peak() / 1e12
    elif isa == "avxvnni":
        now = {"AVX-VNNI": K.avxvnni_peak() / 1e12}
    elif isa in ("avx2", "avx512"):
        now = {"AVX2 vpmaddwd": K.avx2_peak() / 1e12}
    else:
        return {}
    seen.append(now)
    return {name: max(s[name] for s in seen) for name in now}


def report(net, batch, rows, show_layers, peaks, layouts=None):
    layouts = layouts or ["nchw"] * len(rows)
    layout = "nchw" if set(layouts) == {"nchw"} else "channels_last"
    cols = [c for c in ("int8", "int8r", "int8a", "f32", "torch", "ort") if c in rows[0][1]]
    if show_layers:
        print(f"\n{net} batch {batch}: ms per layer")
        for name, row in rows:
            print(f"  {name:<28}" + "".join(f"{c} {row[c]:8.3f}  " for c in cols))
    total = {c: sum(r[c] for _, r in rows) for c in cols + ["macs"]}
    tops = {c: 2 * total["macs"] / (total[c] / 1000) / 1e12 for c in cols}
    line = "  ".join(f"{c} {total[c]:8.2f} ms ({tops[c]:.3f} TOP/s)" for c in cols)
    peers = [total[c] for c in ("torch", "ort") if c in total]
    print(f"{net:<20} b{batch:<3} {len(rows):>3} convs  {line}  (ours {layout})")
    for c in (c for c in ("int8", "int8r", "int8a") if c in total):
        vs_f32 = total[c] / total["f32"]
        ratio = f"{c}/f32 {vs_f32:.2f}x ({_target(vs_f32, TARGET_VS_F32)})"
        if peers:
            vs_peer = total[c] / min(peers)
            ratio += f"  {c}/best peer {vs_peer:.2f}x ({_target(vs_peer, TARGET_VS_PEER)})"
        print(f"{'':<20} {ratio}")
        if peaks:
            print(f"{'':<20} {c} at " + ", ".join(f"{100 * tops[c] / p:.0f} % of the {name} "
                                               f"peak ({p:.2f} TOP/s)"
                                               for name, p in peaks.items()))
    return {"layers": {name: row for name, row in rows}, "total_ms": total, "tops": tops,
            "peak_tops": peaks, "layouts": dict(zip([name for name, _ in rows], layouts))}


def _peer_notes():
    """Say which peer columns are missing and why."""
    import importlib.util
    for module, col in (("torch", "torch"), ("onnxruntime", "ort"), ("onnx", "ort")):
        if importlib.util.find_spec(module) is None:
            print(f"note: `{module}` not importable: the {col} column is skipped")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", default=",".join(NETWORKS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--repeat", type=int, default=5)
    # 3: the median of 3 alternating rounds survives one slow spell of a shared machine; with
    # 1 or 2 a spell on one side set the figure (ResNet-18 batch 1 read 2.8-3.5x, else 1.0)
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternations of ours and the peers; median over them")
    parser.add_argument("--stat", choices=sorted(STAT), default="median")
    parser.add_argument("--threads", type=int, default=0, help="0: the library default")
    parser.add_argument("--layers", action="store_true", help="print every layer")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--reduce-range", action="store_true",
                        help="also time ours with 7-bit weights (column int8r): no residual "
                             "on the narrow tile of AVX2 without VNNI")
    parser.add_argument("--algorithm", choices=[a for a in K.CONV_ALGORITHMS if a != "auto"],
                        help="also time ours with this conv algorithm forced where a layer "
                             "takes it, else the automatic one (column int8a): e.g. amx for "
                             "1x1 layers, which the automatic choice keeps on VNNI")
    args = parser.parse_args()
    # numpy came before tianyuan here: OpenBLAS must get its short spin from a restart, or
    # its workers slow the float convolutions that follow its GEMMs
    restart_with_blas_threads(args.threads or ty.get_num_threads())
    if args.threads:
        ty.set_num_threads(args.threads)
    print(f"ISA {ty.current_isa()}, {ty.get_num_threads()} threads; {args.stat} of "
          f"{args.repeat}, median over {args.rounds} alternating rounds")
    _peer_notes()
    if args.algorithm == "amx" and ty.current_isa() != "amx":
        print("note: no AMX here: the int8a column runs emulated tiles (its times mean nothing)")
    results = {"isa": ty.current_isa(), "threads": ty.get_num_threads(), "stat": args.stat,
               "repeat": args.repeat, "rounds": args.rounds, "networks": {}}
    peaks_seen = []
    measured_peaks(peaks_seen)
    for net, layers, batch in networks_and_batches(parser, args.nets, args.batches):
        layouts = our_layouts(layers)
        rows = bench_net(layers, batch, args.repeat, args.stat, args.rounds,
                         args.reduce_range, args.algorithm, layouts)
        # the peak is measured after each network too, as the shared machine's speed drifts
        results["networks"][f"{net}_b{batch}"] = report(net, batch, rows, args.layers,
                                                        measured_peaks(peaks_seen), layouts)
        if args.json:  # rewritten after each network: a killed run keeps what it has
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
