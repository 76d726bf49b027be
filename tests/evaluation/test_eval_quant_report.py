"""QuantReport: float vs int8 rows, and per-layer SQNR matched through the fuse groups."""
import json
import math

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn
from tianyuan import quantization as Q
from tianyuan.evaluation import QuantReport, sqnr_db
from tianyuan.evaluation.quant_report import layer_pairs, sensitivity


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        self.conv, self.bn, self.relu = nn.Conv2d(3, 4, 3, padding=1, bias=False), \
            nn.BatchNorm2d(4), nn.ReLU()
        self.pool, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten()
        self.fc = nn.Linear(4, 3)

    def fuse_groups(self):
        return [["conv", "bn", "relu"]]

    def forward(self, x):
        x = self.relu(self.bn(self.conv(self.quant(x))))
        return self.dequant(self.fc(self.flatten(self.pool(x))))


def test_sqnr_db():
    x = np.array([3.0, 4.0])
    assert sqnr_db(x, x) == math.inf
    assert sqnr_db(x, x + np.array([0.3, 0.4])) == pytest.approx(20.0)   # 10 % amplitude


def test_report_rows_sensitivity_and_json(tmp_path):
    ty.manual_seed(0)
    model = Net().eval()
    x = ty.tensor(np.random.default_rng(0).standard_normal((8, 3, 8, 8)).astype(np.float32))
    int8 = Q.quantize(Q.calibrate(Q.quantize_qat(model, Q.calibration_qconfig), [x]))
    assert layer_pairs(model, int8) == {"quant": "quant", "conv": "relu", "pool": "pool",
                                        "fc": "fc", "dequant": "dequant"}
    scores = iter([90.0, 88.5])
    report = QuantReport.measure(model, {"ptq": int8}, lambda m: {"top1": next(scores)}, x,
                                 repeats=1, warmup=0, worst=2, info={"model": "net"})
    float_row, ptq_row = report.rows
    assert ptq_row["drop"] == pytest.approx(1.5) and float_row["precision"] == "fp32"
    assert ptq_row["size_kb"] < float_row["size_kb"] and ptq_row["ms_batch16"] > 0
    layers = report.sensitivity["ptq"]
    assert {r["layer"] for r in layers} == {"quant", "conv", "pool", "fc"}   # int8 outputs
    assert [r["sqnr_db"] for r in layers] == sorted(r["sqnr_db"] for r in layers)
    assert 15 < layers[0]["sqnr_db"] < 80 and ptq_row["output_sqnr_db"] > 15
    text = report.table()
    assert "ptq" in text and "sqnr_db" in text and layers[0]["layer"] in text
    saved = json.load(open(report.save(str(tmp_path / "q.json"))))
    assert {"model", "rows", "worst_layers", "sensitivity"} <= set(saved)
    assert len(saved["worst_layers"]) == 2


def test_table_flags_noisy_times():
    rows = [{"model": "float", "precision": "fp32", "top1": 90.0, "drop": 0.0,
             "ms_batch1": 2.0, "ms_batch1_spread": 0.05, "size_kb": 10.0},
            {"model": "ptq", "precision": "int8", "top1": 89.0, "drop": 1.0,
             "ms_batch1": 1.0, "ms_batch1_spread": 0.6, "noisy": ["ms_batch1"], "size_kb": 3.0}]
    report = QuantReport(rows)
    text = report.table()
    assert "1.000 ±60% noisy" in text and "2.000" in text and "_spread" not in text
    assert "more than 25%" in text and report.noisy() == [("ptq", "ms_batch1")]
    assert "noisy" not in QuantReport(rows[:1]).table()


def test_sensitivity_in_chunks_equals_one_pass():
    ty.manual_seed(0)
    model = Net().eval()
    x = ty.tensor(np.random.default_rng(1).standard_normal((10, 3, 8, 8)).astype(np.float32))
    int8 = Q.quantize(Q.calibrate(Q.quantize_qat(model, Q.calibration_qconfig), [x]))
    whole, chunked = sensitivity(model, int8, x, chunk=10), sensitivity(model, int8, x, chunk=3)
    assert whole[0] == pytest.approx(chunked[0], abs=0.01)
    assert {r["layer"]: r["sqnr_db"] for r in whole[1]} == pytest.approx(
        {r["layer"]: r["sqnr_db"] for r in chunked[1]}, abs=0.01)
    assert len(whole[1]) == 4 and whole[1][0]["sqnr_db"] < 100
