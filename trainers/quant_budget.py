"""An accuracy budget for `tianyuan quantize` (`quant.max_drop=0.5`): keep the most sensitive
layers float, one more at a time, until the int8 model loses at most `max_drop` points of the
report's metric, or nothing is left to keep (the nearest peer: NNCF's accuracy-aware mode).

The layers are ranked by the QuantReport's per-layer SQNR (lowest first; a fused group is
named by its int8 layer, the group's first module). Keeping a layer float keeps its whole
fuse group float: its members are marked `disable_quantize` (int8 inputs are dequantized
before it) and, where the next layer to run is int8, a QuantStub after the group quantizes
its output again at the scale calibration observed. Each step re-calibrates by PTQ (the
observers after a float layer see its float output, so a calibrated model cannot just be
re-converted), evaluates, and times the int8 model.

>>> steps = search(model, ranked, 0.5, build, evaluate, "top1", "max", 90.1, time_int8)
... # doctest: +SKIP
"""
import copy

import tianyuan as ty
from tianyuan import nn
from tianyuan import quantization as Q
from tianyuan.evaluation.benchmark import compare_latency
from tianyuan.progress import progress

# float leaves that run on whatever they are given: not "the next layer" of a kept group
PASS_THROUGH = ("Identity", "Flatten", "Dropout")


def execution_order(model, example, forward):
    """Dotted names of the leaf modules of `model` in the order one forward of `example`
    (through `forward(model, x)`) calls them."""
    order, handles = [], []
    for name, module in model.named_modules():
        if name and not module._modules:
            handles.append(module.register_forward_hook(
                lambda mod, args, out, name=name: order.append(name)))
    try:
        with ty.no_grad():
            forward(model.eval(), example)
    finally:
        for handle in handles:
            handle.remove()
    return order


def _group(model, name):
    for group in (model.fuse_groups() if hasattr(model, "fuse_groups") else []):
        if group[0] == name:
            return list(group)
    return [name]


def _inside(leaf, names):
    return any(leaf == n or leaf.startswith(n + ".") for n in names)


def _feeds_int8(model, order, members, kept):
    """Whether a leaf run right after the group's last call is an int8 layer (not kept
    float, not a DequantStub)."""
    calls = [i for i, leaf in enumerate(order) if _inside(leaf, members)]
    for i in calls:
        for leaf in order[i + 1:]:
            kind = type(model.get_submodule(leaf)).__name__
            if kind in PASS_THROUGH or _inside(leaf, members):
                continue
            if kind != "DequantStub" and not _inside(leaf, kept):
                return True
            break
    return False


def keep_float_model(model, names, order):
    """A copy of the float `model` with the fuse groups of `names` (int8 layer names) marked
    float and followed by a QuantStub where an int8 layer reads their output; `order`:
    `execution_order(model, ...)`. `prepare_qat` then converts the rest."""
    model = copy.deepcopy(model)
    groups = {name: _group(model, name) for name in names}
    kept = [member for group in groups.values() for member in group]
    for name, group in groups.items():
        for member in group:
            try:
                Q.disable_quantize(model.get_submodule(member))
            except AttributeError as e:
                raise ValueError(f"quant.max_drop: cannot keep {name!r} float: {e}") from None
        if _feeds_int8(model, order, group, kept):
            parent, _, last = group[-1].rpartition(".")
            owner = model.get_submodule(parent)
            owner._modules[last] = nn.Sequential(owner._modules[last], nn.QuantStub())
    return model


def mark_keep_float(model, names, example, forward):
    """`quant.keep_float=[...]`: a copy of the float `model` with `names` (submodules, or int8
    layers naming their fuse group) kept float and re-quantized after where an int8 layer
    reads them (keep_float_model, in the order one `forward(model, example)` runs)."""
    return keep_float_model(model, names, execution_order(model, ty.as_tensor(example), forward))


def candidates(model, layers):
    """The SQNR list's int8 layers (worst first) that can be kept float: not the stubs."""
    names = []
    for row in layers:
        kind = type(model.get_submodule(row["layer"])).__name__
        if kind not in ("QuantStub", "DequantStub") and row["layer"] not in names:
            names.append(row["layer"])
    return names


def search(model, ranked, max_drop, build, evaluate, metric, mode, reference, time_int8,
           first=None, show_progress=False):
    """Keep `ranked` layers float one at a time until the drop <= `max_drop`. `build(names)`:
    the int8 model with `names` kept float; `evaluate(m)` -> {metric: value}; `reference`:
    the float model's value; `mode`: "max" (higher is better, drop = reference - value) or
    "min" (FID: drop = value - reference); `time_int8(m)` -> {"ms", "spread", "noisy"};
    `first`: (value, ms) of the plain int8 model when already measured. Returns the steps:
    [{"keep_float", metric, "drop", "ms", "noisy"}], the last within budget unless every
    layer was kept."""
    if mode not in ("max", "min"):
        raise ValueError(f"quant.max_drop: mode must be 'max' or 'min', got {mode!r}")
    sign = 1.0 if mode == "max" else -1.0
    steps, kept = [], []
    plan = [None] + list(ranked)
    for layer in progress(plan, "accuracy budget", unit="step", disable=not show_progress):
        if layer is not None:
            kept.append(layer)
        if layer is None and first is not None:
            value, timed = first
        else:
            int8 = build(list(kept))
            value, timed = evaluate(int8)[metric], time_int8(int8)
        drop = round(sign * (reference - value), 4)
        steps.append({"keep_float": list(kept), metric: value, "drop": drop,
                      "ms": timed["ms"], "noisy": timed["noisy"]})
        if drop <= max_drop:
            break
    return steps


def within_budget(cfg, report, model, int8, calibrate, evaluate, example, forward, keep_float=(),
                  mode="max"):
    """`tianyuan quantize`'s quant.max_drop: the search from the report's PTQ row and
    per-layer SQNR; `calibrate(float model with layers marked) -> int8 model` (PTQ on fresh
    calibration batches), `forward(model, x)`: what the report times. Returns the report's
    "budget" entry: {"max_drop", "met", "keep_float", "steps"}."""
    metric, batch = report.info["metric"], cfg.report.batches[0]
    rows = {row["model"]: row for row in report.rows}
    keep_float = list(keep_float)   # the user's, kept in every step
    ranked = [n for n in candidates(int8, report.sensitivity["ptq"])
              if not _inside(n, keep_float)]
    order = execution_order(model, ty.as_tensor(example), forward)
    input_size = tuple(report.info["input_size"])

    def time_int8(m):
        return compare_latency({"int8": m}, batch, input_size, cfg.report.repeats,
                               forward=forward, spread=True)["int8"]
    plain = rows["ptq"]
    first = (plain[metric], {"ms": plain[f"ms_batch{batch}"],
                             "noisy": f"ms_batch{batch}" in plain.get("noisy", ())})
    steps = search(model, ranked, float(cfg.quant.max_drop),
                   lambda names: calibrate(keep_float_model(model, keep_float + names, order)),
                   evaluate, metric, mode, rows["float"][metric], time_int8, first,
                   show_progress=cfg.trainer.progress)
    return {"max_drop": float(cfg.quant.max_drop), "met": steps[-1]["drop"] <= cfg.quant.max_drop,
            "keep_float": steps[-1]["keep_float"], "batch": batch, "steps": steps}
