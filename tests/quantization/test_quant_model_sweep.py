"""A seeded random sweep of whole models through the int8 flow: random small nets (convs of
any kernel, stride, padding, dilation and groups with batch norm and ReLU / ReLU6 or none,
residual adds, concats, pools, a linear head) are fused, calibrated, converted to int8 and
traced; each int8 layer must equal the eval QAT layer on its inputs bit for bit (and the
float form QAT trains with be within one quantization step), the graph must equal the model bit for bit at another batch size,
also after a save and load (and in float, with and without folding). Every int8 case runs on
one of this machine's ISA paths in turn.

Like test_quant_sweep.py: TIANYUAN_SWEEP_SEED picks the seed, TIANYUAN_SWEEP=N runs N
kernel cases and N // 3 models (default 8 models)."""
import os

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn
from tianyuan import quantization as Q

from tianyuan.quantization.qarray import dequantize_tensor

from qnets import assert_layers_equal_qat, record_int8_layers, unmarked

SWEEP = max(1, int(os.environ.get("TIANYUAN_SWEEP", "24")) // 3)
SEED = int(os.environ.get("TIANYUAN_SWEEP_SEED", "0"))
QCONFIGS = ("ema_fakequant_qconfig", "min_max_fakequant_qconfig", "calibration_qconfig",
            "lsq_qconfig", "int8_symmetric_qconfig", "reduce_range_qconfig",
            "calibration_reduce_range_qconfig")


class RandomNet(nn.Module):
    """QuantStub, random blocks (`plan`), global pool, Flatten, Linear, DequantStub."""

    def __init__(self, rng, wide):
        super().__init__()
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        self.plan, self.groups = [], []
        self.size = int(rng.integers(9, 20))
        channels, size = 3, self.size
        for i in range(int(rng.integers(2, 6))):
            kind = str(rng.choice(["conv", "conv", "residual", "concat", "pool"]))
            if kind == "pool" and size < 3:
                kind = "conv"
            channels, size = getattr(self, "_" + kind)(rng, f"b{i}", channels, size, wide)
            self.plan.append((kind, f"b{i}"))
        self.gap, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten()
        if rng.random() < 0.3:   # a hidden layer, fused with its ReLU (LinearReLU)
            hidden = int(rng.integers(4, 40))
            self.hidden, self.hidden_act = nn.Linear(channels, hidden), nn.ReLU()
            self.groups.append(["hidden", "hidden_act"])
            channels = hidden
        self.fc = nn.Linear(channels, int(rng.integers(2, 12)))

    def _conv(self, rng, name, c, size, wide, same=False, out=None):
        """conv (+ bn) (+ ReLU / ReLU6), fused as one group, `out` channels or any; returns
        (channels, size)."""
        k = int(rng.choice([1, 3, 3, 5, 7]))
        stride = 1 if same else int(rng.choice([1, 1, 2]))
        dilation = 1 if same or rng.random() < 0.8 else 2
        reach = (k - 1) * dilation
        pad = reach // 2 if same else int(rng.integers(0, reach + 1))
        if size + 2 * pad - reach < 1:
            pad = (reach - size + 2) // 2
        if out is not None:
            groups, oc = 1, out
        elif wide:
            groups, oc = 1, int(rng.integers(64, 97))
        else:
            groups = c if c > 3 and rng.random() < 0.3 else 1
            oc = c * int(rng.choice([1, 2])) if groups > 1 else int(rng.integers(4, 40))
        bn = rng.random() < 0.8
        act = str(rng.choice(["relu", "relu6", "none"]))
        conv = nn.Conv2d(c, oc, k, stride=stride, padding=pad, dilation=dilation,
                         groups=groups, bias=not bn)
        setattr(self, name, conv)
        group = [name]
        if bn:
            setattr(self, name + "_bn", _random_bn(rng, oc))
            group.append(name + "_bn")
        if act != "none":
            setattr(self, name + "_act", nn.ReLU() if act == "relu" else nn.ReLU6())
            group.append(name + "_act")
        if len(group) > 1:
            self.groups.append(group)
        return oc, (size + 2 * pad - reach - 1) // stride + 1

    def _residual(self, rng, name, c, size, wide):
        mid, _ = self._conv(rng, name + "_a", c, size, wide, same=True)
        self._conv(rng, name + "_b", mid, size, wide, same=True, out=c)   # c for the add
        setattr(self, name + "_add", nn.AddReLU() if rng.random() < 0.5 else nn.Add())
        return c, size

    def _concat(self, rng, name, c, size, wide):
        ca, _ = self._conv(rng, name + "_a", c, size, wide, same=True)
        cb, _ = self._conv(rng, name + "_b", c, size, wide, same=True)
        setattr(self, name + "_cat", nn.Concat(1))
        return ca + cb, size

    def _pool(self, rng, name, c, size, wide):
        k = int(rng.integers(2, min(size, 4) + 1))
        stride, pad = int(rng.integers(1, 3)), int(rng.integers(0, k // 2 + 1))
        pool = nn.MaxPool2d(k, stride, pad) if rng.random() < 0.5 else nn.AvgPool2d(k, stride, pad)
        setattr(self, name, pool)
        return c, (size + 2 * pad - k) // stride + 1

    def fuse_groups(self):
        return self.groups

    def _run(self, name, x):
        for suffix in ("", "_bn", "_act"):
            if hasattr(self, name + suffix):
                x = getattr(self, name + suffix)(x)
        return x

    def forward(self, x):
        x = self.quant(x)
        for kind, name in self.plan:
            if kind == "residual":
                y = self._run(name + "_b", self._run(name + "_a", x))
                x = getattr(self, name + "_add")(y, x)
            elif kind == "concat":
                x = getattr(self, name + "_cat")([self._run(name + "_a", x),
                                                  self._run(name + "_b", x)])
            else:
                x = self._run(name, x)
        x = self.flatten(self.gap(x))
        if hasattr(self, "hidden"):
            x = self.hidden_act(self.hidden(x))
        return self.dequant(self.fc(x))


def _random_bn(rng, channels):
    bn = nn.BatchNorm2d(channels)
    bn.running_mean.data[:] = rng.normal(0, 0.5, channels)
    bn.running_var.data[:] = rng.uniform(0.3, 3, channels)
    bn.weight.data[:] = rng.uniform(0.5, 1.5, channels)
    bn.bias.data[:] = rng.normal(0, 0.3, channels)
    return bn


def _bias_step(module, args):
    """The int8 bias's unit (s_in * s_w) in output steps, the largest over channels; 0 for
    layers without weights."""
    if not hasattr(module, "weight_scale"):
        return 0.0
    s_in = args[0].data.scale
    return float((s_in * np.asarray(module.weight_scale.data) / module.out_scale).max())


def _layers_equal_qat(int8, qat, x):
    """Each int8 layer's output equals the eval QAT layer's on the same inputs, bit for bit;
    given the inputs without their grids (the float form QAT trains with), within a step."""
    seen = record_int8_layers(int8, x)
    assert_layers_equal_qat(seen, qat)
    with ty.no_grad():
        for name, (args, out) in seen.items():
            if not hasattr(qat.get_submodule(name), "act_observer"):
                continue   # pooling: snapped to the int8 average by the input's grid in training too
            ref = qat.get_submodule(name)(*unmarked(args)).numpy()
            scale = getattr(out.data, "scale", None) or 1.0
            steps = np.abs(dequantize_tensor(out).numpy() - ref) / scale
            assert steps.max() <= 1 + 1e-3, f"{name}: {steps.max()} steps"
            # few values may differ: a systematic error (a bias or zero point off by half a
            # step) would move half of them. Allowed: 5 % (2 values in a small layer), plus
            # the int8 bias's rounding to s_in * s_w, up to half that in steps either way;
            # not counted: a channel whose inputs all sit at the zero point (a dead ReLU before
            # it), its bias alone, one rounding decision for the whole channel
            axes = tuple(i for i in range(ref.ndim) if i != 1)
            varying = np.broadcast_to(ref.std(axis=axes, keepdims=True) > 0, ref.shape)
            off = int((steps[varying] > 0.5).sum())
            allowed = (0.05 + _bias_step(int8.get_submodule(name), args)) * varying.sum()
            assert off <= max(2, allowed), f"{name}: {off} of {varying.sum()} values off by a step"
    return seen


@pytest.mark.parametrize("index", range(SWEEP))
def test_model_sweep(index, tmp_path):
    rng = np.random.default_rng((SEED, 100, index))
    isas = ty.available_isas()
    isa, before = isas[index % len(isas)], ty.current_isa()
    ty.manual_seed(index)
    model = RandomNet(rng, wide=rng.random() < 0.3).eval()
    x = rng.normal(0, 1, (4, 3, model.size, model.size)).astype(np.float32)
    qconfig = QCONFIGS[index % len(QCONFIGS)]
    kept = rng.random() < 0.2   # the classifier kept in float (its inputs dequantized)
    if kept:
        Q.disable_quantize(model.fc)
    try:
        ty.set_isa(isa)
        qat = Q.quantize_qat(model, getattr(Q, qconfig))
        Q.calibrate(qat, [rng.normal(0, 1, x.shape).astype(np.float32) for _ in range(3)])
        if rng.random() < 0.5:   # a QAT step: BN folding with batch statistics, observers on
            qat.train()
            qat(ty.tensor(rng.normal(0, 1, x.shape).astype(np.float32))).sum().backward()
        qat.eval()
        int8 = Q.quantize(qat)
        _layers_equal_qat(int8, qat, x)
        graph = ty.jit.trace(int8, ty.tensor(x[:2]), dynamic_batch=True)
        graph.save(tmp_path / "m.graph")
        want = int8(ty.tensor(x)).numpy()
        case = f"{isa}, {qconfig}, float fc {kept}: {model.plan}"
        for g in (graph, ty.runtime.load(tmp_path / "m.graph")):
            np.testing.assert_array_equal(g(ty.tensor(x)).numpy(), want, err_msg=case)
    finally:
        ty.set_isa(before)


@pytest.mark.parametrize("index", range(SWEEP))
def test_float_graph_sweep(index, tmp_path):
    """The same nets in float: traced as they are (bit for bit, any batch, saved and loaded)
    and with batch norms and activations folded (fuse=True; trace checks it within float
    rounding)."""
    rng = np.random.default_rng((SEED, 101, index))
    model = RandomNet(rng, wide=rng.random() < 0.3).eval()
    x = ty.tensor(rng.normal(0, 1, (3, 3, model.size, model.size)).astype(np.float32))
    graph = ty.jit.trace(model, x[:2], dynamic_batch=True)
    graph.save(tmp_path / "f.graph")
    with ty.no_grad():
        want = model(x).numpy()
    for g in (graph, ty.runtime.load(tmp_path / "f.graph")):
        np.testing.assert_array_equal(g(x).numpy(), want, err_msg=str(model.plan))
    fused = ty.jit.trace(model, x, fuse=True)
    np.testing.assert_allclose(fused(x).numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
