"""What int8 costs and gains: float vs int8 (PTQ and/or QAT) accuracy, drop, latency, size, and
per-layer sensitivity — printed as a table, saved as JSON.

Sensitivity is the SQNR (signal-to-quantization-noise ratio, dB) of each quantized layer's
int8 output, dequantized, against the float model's output of the same layer on the same
images: 10 * log10(sum(f^2) / sum((f - q)^2)). Layers are matched by module name through
forward hooks; a fused int8 layer (`conv1` = conv + bn + relu) is compared with the float
output of its group's last member (`relu`), which `fuse_groups()` names. 30 dB is about a
3 % RMS error; the worst layers are where PTQ loses accuracy (and where to keep float with
`quantization.disable_quantize`).

>>> report = QuantReport.measure(model, {"ptq": int8}, evaluate, example)   # doctest: +SKIP
>>> print(report.table()); report.save("quant.json")                       # doctest: +SKIP
"""
import math

import numpy as np

import tianyuan as ty
from tianyuan import quantization as Q
from tianyuan.progress import progress

from .benchmark import NOISY_SPREAD, compare_latency
from .report import format_table, write_json

MAX_DB = 200.0


def sqnr_db(reference, test):
    """10 log10(signal power / noise power) in dB; inf when equal."""
    power = [0.0, 0.0]
    _add_powers(power, reference, test)
    return _ratio_db(*power)


def state_kb(model):
    """Size of the state dict (what a weights file holds) in KiB: float32 weights, or int8
    weights + float bias and scales."""
    return sum(np.asarray(v).nbytes for v in model.state_dict().values()) / 1024.0


def _record(model, names, quantized_only):
    """Forward hooks keeping each named module's outputs (dequantized) per call; with
    `quantized_only`, only outputs that are int8 (QArray) are kept."""
    store, handles = {}, []
    for name, module in model.named_modules():
        if name in names:
            def hook(mod, args, out, name=name):
                if quantized_only and not Q.is_quantized(out):
                    return
                store.setdefault(name, []).append(Q.dequantize_tensor(out).numpy().ravel())
            handles.append(module.register_forward_hook(hook))
    return store, handles


def _flat(out):
    """A model's output (a tensor, or lists/dicts of them: a detector's per-level maps) as
    one float array."""
    if isinstance(out, dict):
        out = [out[k] for k in sorted(out)]
    if isinstance(out, (list, tuple)):
        return np.concatenate([_flat(o).ravel() for o in out]) if out else np.zeros(0)
    return np.asarray(Q.dequantize_tensor(out).numpy())


def _call(model, x):
    return model(x)


def _run(model, example, names, quantized_only=False, forward=_call):
    store, handles = _record(model, names, quantized_only)
    try:
        model.eval()
        with ty.no_grad():
            out = _flat(forward(model, example))
    finally:
        for handle in handles:
            handle.remove()
    return out, store


def layer_pairs(float_model, int8_model, groups=None):
    """{int8 module name: float module name} for every int8 layer with a float twin."""
    from tianyuan.nn.quantized.module import QuantizedModule
    if groups is None and hasattr(float_model, "fuse_groups"):
        groups = float_model.fuse_groups()
    fused = {group[0]: group[-1] for group in groups or []}
    float_names = {name for name, _ in float_model.named_modules()}
    pairs = {}
    for name, module in int8_model.named_modules():
        twin = fused.get(name, name)
        if isinstance(module, QuantizedModule) and name and twin in float_names:
            pairs[name] = twin
    return pairs


SQNR_CHUNK = 8     # images per pass of the per-layer comparison: its memory is this many


def sensitivity(float_model, int8_model, example, groups=None, forward=_call, chunk=SQNR_CHUNK):
    """(output SQNR dB, [{"layer", "float_layer", "sqnr_db"}] sorted worst first);
    `forward(model, example)`: what runs the models (default model(example)). The example
    runs `chunk` items at a time through both models, each layer's signal and noise powers
    summed over the chunks (the same SQNR as one pass over all), so that only one chunk's
    layer outputs are held at once (32 images of ResNet-18 at 224: 1.5 GB in one pass)."""
    pairs = layer_pairs(float_model, int8_model, groups)
    powers, output, mismatched = {}, [0.0, 0.0], set()
    for start in range(0, len(example), chunk):
        part = example[start:start + chunk]
        ref_out, ref = _run(float_model, part, set(pairs.values()), forward=forward)
        out, got = _run(int8_model, part, set(pairs), quantized_only=True, forward=forward)
        if output is not None and ref_out.shape == out.shape:
            _add_powers(output, ref_out, out)
        else:   # a detector's outputs over proposals of its own: another count in int8
            output = None
        for name, twin in pairs.items():
            a, b = got.pop(name, None), ref.get(twin)
            if not a or not b or [x.shape for x in a] != [y.shape for y in b]:
                mismatched.add(name)   # float output, or called a different number of times
                continue
            for x, y in zip(b, a):
                _add_powers(powers.setdefault(name, [0.0, 0.0]), x, y)
    layers = [{"layer": name, "float_layer": pairs[name], "sqnr_db": _db(_ratio_db(*power))}
              for name, power in powers.items() if name not in mismatched]
    layers.sort(key=lambda r: r["sqnr_db"])
    return (None if output is None else _db(_ratio_db(*output))), layers


def _add_powers(acc, reference, test):
    """acc += [sum(reference^2), sum((reference - test)^2)], in float64."""
    reference = np.asarray(reference, np.float64).ravel()
    acc[0] += float(np.dot(reference, reference))
    noise = reference - np.asarray(test, np.float64).ravel()
    acc[1] += float(np.dot(noise, noise))


def _ratio_db(signal, error):
    """sqnr_db from the summed powers."""
    return math.inf if error == 0.0 else 10.0 * math.log10(max(signal, 1e-30) / error)


def _db(value):
    # capped so JSON stays standard (no Infinity): float32 agreement is ~150 dB anyway
    return round(min(value, MAX_DB), 2)


def budget_table(budget, metric):
    """The accuracy budget's steps (trainers/quant_budget.py) as a table and a verdict."""
    batch = budget.get("batch", 1)
    rows = [{"step": i, "kept float": ", ".join(step["keep_float"]) or "-",
             metric: step[metric], "drop": step["drop"],
             f"ms_batch{batch}": f"{step['ms']:.3f}" + (" noisy" if step["noisy"] else "")}
            for i, step in enumerate(budget["steps"])]
    kept = ", ".join(budget["keep_float"]) or "none"
    verdict = (f"within budget with {len(budget['keep_float'])} layer(s) kept float: {kept}"
               if budget["met"] else
               f"not within budget even with every candidate layer float ({kept})")
    return format_table(rows, title=f"\naccuracy budget: drop <= {budget['max_drop']:g} "
                        f"({metric}), keeping the lowest-SQNR layers float one at a time "
                        "(PTQ)") + "\n" + verdict


def _flag_noisy(rows):
    """The rows for printing: a noisy time as "12.300 ±41% noisy"."""
    shown = []
    for row in rows:
        row = dict(row)
        for column in row.get("noisy", []):
            row[column] = f"{row[column]:.3f} ±{row[column + '_spread']:.0%} noisy"
        shown.append(row)
    return shown


class QuantReport:
    """`rows`: one dict per model (float first) with its metrics, drop (points of the
    report's metric lost: float - int8 where higher is better, int8 - float where lower is,
    as FID), median latency per batch size (`ms_batch16`) with the spread of its timing
    rounds (`ms_batch16_spread`, a fraction of the median; `noisy` lists the times whose
    spread passed compare_latency's NOISY_SPREAD, shown "±41% noisy" in the table), size;
    `sensitivity`: {int8 name: layers, worst first}."""

    def __init__(self, rows, sensitivity=None, info=None, worst=5):
        self.rows, self.sensitivity = list(rows), dict(sensitivity or {})
        self.info, self.worst = dict(info or {}), int(worst)

    @classmethod
    def measure(cls, float_model, int8_models, evaluate, example, batches=(1, 16), repeats=20,
                warmup=3, worst=5, groups=None, info=None, show_progress=True, metric="top1",
                mode="max", forward=None, compare_output=True):
        """Evaluate and time `float_model` and each of `int8_models` ({name: int8 model});
        `evaluate(model) -> {metric: value, ...}` (the drop is of `metric`, `mode` "max" or
        "min" saying which way is better); `example`: a batch of what `forward(model, x)`
        takes (default model(x): images (N, C, H, W)) for the per-layer comparison, its
        shape past the batch also sizing the timing input; `show_progress`: a bar (or log
        lines) per phase; `compare_output=False`: no output SQNR (a two-stage detector's
        outputs are over proposals each model finds for itself)."""
        if mode not in ("max", "min"):
            raise ValueError(f"QuantReport: mode must be 'max' or 'min', got {mode!r}")
        forward = forward or _call
        example = ty.as_tensor(example)
        input_size = tuple(example.shape[1:])
        models = [("float", "fp32", float_model)]
        models += [(name, "int8", model) for name, model in int8_models.items()]
        # timed in alternating rounds: a slow spell of a shared machine hits them all alike
        latency = {batch: compare_latency({name: model for name, _, model in models}, batch,
                                          input_size, repeats, warmup, forward=forward,
                                          spread=True)
                   for batch in progress(batches, "time float and int8", unit="batch size",
                                         disable=not show_progress)}
        rows, layers = [], {}
        sign = 1.0 if mode == "max" else -1.0
        for name, precision, model in progress(models, "evaluate, per-layer SQNR",
                                               unit="model", disable=not show_progress):
            row = {"model": name, "precision": precision, **evaluate(model)}
            if metric not in row:
                raise KeyError(f"QuantReport: the evaluation gave {sorted(row)[2:]}, not the "
                               f"report's metric {metric!r}")
            row["drop"] = round(sign * (rows[0][metric] - row[metric]), 4) if rows else 0.0
            for batch in batches:
                timed = latency[batch][name]
                row[f"ms_batch{batch}"] = timed["ms"]
                row[f"ms_batch{batch}_spread"] = timed["spread"]
                if timed["noisy"]:
                    row.setdefault("noisy", []).append(f"ms_batch{batch}")
            row["size_kb"] = round(state_kb(model), 1)
            if precision == "int8":
                row["output_sqnr_db"], layers[name] = sensitivity(
                    float_model, model, example, groups, forward)
                if not compare_output:
                    row["output_sqnr_db"] = None
            rows.append(row)
        info = {**dict(info or {}), "input_size": list(input_size), "metric": metric,
                "better": "higher" if mode == "max" else "lower"}
        return cls(rows, layers, info, worst)

    def worst_layers(self):
        """[{"model", "layer", "float_layer", "sqnr_db"}]: the `worst` lowest-SQNR layers of
        each int8 model."""
        return [{"model": name, **layer} for name, layers in self.sensitivity.items()
                for layer in layers[:self.worst]]

    def table(self):
        first = self.rows[0]
        scores = list(first)[2:list(first).index("drop")]    # evaluate's metrics, in order
        times = [c for c in first if c.startswith("ms_batch") and not c.endswith("_spread")]
        columns = (["model", "precision"] + scores + ["drop"] + times + ["size_kb"] +
                   (["output_sqnr_db"] if self.sensitivity else []))
        text = format_table(_flag_noisy(self.rows), columns, title="\nquantization report")
        if any(row.get("noisy") for row in self.rows):
            text += (f"\nnoisy: the timing rounds' medians differ by more than "
                     f"{NOISY_SPREAD:.0%} (±: that spread): another process was using the "
                     "CPU; rerun on a quiet machine before trusting the times or their ratio")
        if "input_size" in self.info:
            pre = self.info.get("preprocessing") or {}
            used = ", ".join(f"{k} {v}" for k, v in pre.items() if k != "source")
            text += (f"\ninput {' x '.join(map(str, self.info['input_size']))}"
                     + (f"; preprocessing ({pre.get('source', 'given')}): {used}" if used else ""))
        if "peak_rss_mb" in self.info:
            text += f"\npeak memory (RSS) of the run: {self.info['peak_rss_mb']:.0f} MiB"
        if "budget" in self.info:
            text += "\n" + budget_table(self.info["budget"], self.info["metric"])
        if self.sensitivity:
            text += "\n" + format_table(self.worst_layers(), title=(
                f"\nper-layer sensitivity: the {self.worst} lowest-SQNR int8 layers "
                "(dB, vs the float model's same layer)"))
        return text

    def noisy(self):
        """[(model, column)] of the times whose rounds disagreed (compare_latency's
        NOISY_SPREAD)."""
        return [(row["model"], column) for row in self.rows for column in row.get("noisy", [])]

    def to_dict(self):
        return {**self.info, "rows": self.rows, "worst_layers": self.worst_layers(),
                "sensitivity": self.sensitivity}

    def save(self, path):
        """Write to_dict() as JSON; returns the path."""
        return write_json(path, self.to_dict())

    def __str__(self):
        return self.table()
