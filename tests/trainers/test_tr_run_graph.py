"""`tianyuan run FILE`: a saved int8 graph runs without the model's code, on random data or
an .npy input, and reports its latency, peak memory and (--profile) its steps."""
import json

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import jit
from tianyuan import quantization as Q
from tianyuan.trainers import cli

from tests.quantization.qnets import TinyNet


def test_run_a_saved_int8_graph(tmp_path, capsys):
    ty.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    qat = Q.quantize_qat(TinyNet())
    Q.calibrate(qat, [x, rng.standard_normal(x.shape).astype(np.float32)])
    graph = jit.trace(Q.quantize(qat), ty.tensor(x))
    graph.save(tmp_path / "tiny.graph")
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", str(tmp_path / "tiny.graph"), "--profile", "--repeats", "2",
                     "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"),
                     "--json", str(tmp_path / "run.json")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), graph(ty.tensor(x)).numpy())
    report = json.load(open(tmp_path / "run.json"))
    assert report["native"] == report["steps"] == len(graph.steps)
    assert report["latency_ms"] > 0 and len(report["profile"]) == len(graph.steps)
    out = capsys.readouterr().out                      # --profile: a row per step
    assert "steps (median ms)" in out and all(s.name in out for s in graph.steps), out
    assert cli.main(["run", str(tmp_path / "tiny.graph"), "--repeats", "1"]) == 0  # random
    with pytest.raises(SystemExit, match="traced for batch 2 only"):
        cli.main(["run", str(tmp_path / "tiny.graph"), "--batch", "3"])
    jit.trace(Q.quantize(qat), ty.tensor(x), dynamic_batch=True).save(tmp_path / "any.graph")
    assert cli.main(["run", str(tmp_path / "any.graph"), "--batch", "5", "--repeats", "1",
                     "--json", str(tmp_path / "any.json")]) == 0
    assert json.load(open(tmp_path / "any.json"))["inputs"] == "float32[5, 3, 16, 16]"
