"""quant.max_drop: the most sensitive layers kept float, one at a time, until the int8
model's drop is within the budget (trainers/quant_budget.py)."""
import json

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn
from tianyuan.evaluation.benchmark import compare_latency
from tianyuan.evaluation.quant_report import budget_table, sensitivity
from tianyuan.trainers import cli
from tianyuan.trainers import quant_budget as B
from tianyuan.trainers.quantize import ptq


class Net(nn.Module):
    """Two conv-BN-ReLU groups, a conv, a classifier; conv2's weights int8-hostile: in each
    output channel one tap 30x the rest, on input channel 0 which is always 0 (bn1's bias
    -100 before the ReLU), so float ignores it while per-channel int8 rounds the other taps
    to 0."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        self.conv1, self.bn1, self.relu1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), \
            nn.ReLU()
        self.conv2, self.bn2, self.relu2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), \
            nn.ReLU()
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool, self.flatten, self.fc = nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)
        self.bn1.bias.data[0] = -100.0
        self.conv2.weight.data[:, 0, 1, 1] = 30.0

    def fuse_groups(self):
        return [["conv1", "bn1", "relu1"], ["conv2", "bn2", "relu2"]]

    def forward(self, x):
        x = self.relu1(self.bn1(self.conv1(self.quant(x))))
        x = self.conv3(self.relu2(self.bn2(self.conv2(x))))
        return self.dequant(self.fc(self.flatten(self.pool(x))))


def call(model, x):
    return model(x)


@pytest.fixture(scope="module")
def net():
    ty.manual_seed(0)
    x = ty.tensor(np.random.default_rng(0).standard_normal((16, 3, 8, 8)).astype(np.float32))
    return Net().eval(), x


def test_keep_float_model_requantizes_only_before_int8_layers(net):
    model, x = net
    order = B.execution_order(model, x, call)
    assert order[:4] == ["quant", "conv1", "bn1", "relu1"] and order[-1] == "dequant"
    marked = B.keep_float_model(model, ["conv2", "fc"], order)
    assert type(marked.relu2) is nn.Sequential       # conv3, int8, reads the group's output
    assert type(marked.fc) is nn.Linear                # the DequantStub reads fc's: stays float
    assert type(model.relu2) is nn.ReLU and "quant_disabled" not in model.conv2.__dict__
    int8 = ptq(marked, [x])
    assert type(int8.conv2) is nn.Conv2d and type(int8.bn2) is nn.BatchNorm2d
    assert type(int8.conv3).__module__.startswith("tianyuan.nn.quantized")
    assert int8(x).shape == (16, 4)
    with pytest.raises(ValueError, match="cannot keep 'nope' float"):
        B.keep_float_model(model, ["nope"], order)


@pytest.mark.parametrize("mode", ["max", "min"])
def test_budget_keeps_the_worst_layer_float_until_within(net, mode):
    model, x = net
    ref = model(x).numpy()

    def evaluate(m):      # "score": agreement with float (higher is better), "err" lower
        err = 100.0 * float(np.abs(m(x).numpy() - ref).mean() / np.abs(ref).mean())
        return {"score": 100.0 - err} if mode == "max" else {"err": err}
    metric, reference = ("score", 100.0) if mode == "max" else ("err", 0.0)
    int8 = ptq(model, [x])
    ranked = B.candidates(int8, sensitivity(model, int8, x)[1])
    assert ranked[0] == "conv2" and "quant" not in ranked and "dequant" not in ranked
    order = B.execution_order(model, x, call)
    steps = B.search(model, ranked, 2.0, lambda keep: ptq(B.keep_float_model(model, keep,
                                                                             order), [x]),
                     evaluate, metric, mode, reference,
                     lambda m: compare_latency({"m": m}, 1, (3, 8, 8), 2, 0, spread=True)["m"])
    assert steps[0]["keep_float"] == [] and steps[0]["drop"] > 2.0       # plain int8: over
    assert steps[-1]["keep_float"] == ["conv2"] and 0 <= steps[-1]["drop"] <= 2.0
    budget = {"max_drop": 2.0, "met": True, "keep_float": ["conv2"], "steps": steps}
    text = budget_table(budget, metric)
    assert "drop <= 2" in text and "kept float: conv2" in text and "ms_batch1" in text


def test_budget_from_the_command_line(shapes_root, tmp_path, capsys):
    out = tmp_path / "quant.json"
    assert cli.main(["quantize", "model=shapesnet", "data=shapes", f"data.root={shapes_root}",
                     "method=ptq", "calib_batches=1", "trainer.progress=false",
                     "report.repeats=1", "report.batches=[1]", "report.sensitivity_images=4",
                     "quant.max_drop=-1", f"out={out}"]) == 0    # unreachable: keeps all
    text = capsys.readouterr().out
    assert "accuracy budget: drop <= -1 (top1)" in text and "not within budget" in text
    budget = json.load(open(out))["budget"]
    assert not budget["met"] and len(budget["steps"]) == 1 + len(budget["keep_float"])
    assert {"features.0.0", "fc"} <= set(budget["keep_float"])
    assert all({"keep_float", "top1", "drop", "ms", "noisy"} <= set(s) for s in budget["steps"])
    assert cli.main(["quantize", "model=shapesnet", "method=qat", "quant.max_drop=1"]) == 2
    assert "quant.max_drop keeps layers float in PTQ: use method=ptq" in capsys.readouterr().err
