"""`tianyuan quantize` on a trained smoke model (its int8 models exported as graph files),
`tianyuan bench precision=int8`, and the qconfig names the recipes use."""
import json

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn, zoo
from tianyuan import quantization as Q
from tianyuan.trainers import cli
from tianyuan.trainers.classification import prepare_qat
from tianyuan.trainers.config import compose, options


def test_quantize_prints_report_and_writes_json(shapes_root, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "experiment=smoke_shapesnet", f"data.root={shapes_root}",
                     f"out_dir={run}", "trainer.max_iters=12", "trainer.eval_every=0",
                     "trainer.progress=false"]) == 0
    capsys.readouterr()
    out = tmp_path / "quant.json"
    assert cli.main(["quantize", "model=shapesnet", "data=shapes", f"data.root={shapes_root}",
                     f"weights={run}/model_final.safetensors", "method=both", "calib_batches=2",
                     "qat.iters=3", "trainer.progress=false", f"out_dir={tmp_path}/qat",
                     "report.repeats=1", "report.batches=[1,2]", "report.sensitivity_images=8",
                     f"out={out}", f"export.dir={tmp_path}/export", "export.batch=2"]) == 0
    text = capsys.readouterr().out
    for method in ("ptq", "qat"):                      # the int8 models as graph files
        graph = ty.runtime.load(tmp_path / "export" / f"{method}.graph")
        assert graph.input_specs[0][0][0] == 2 and all(s.native for s in graph.steps)
    assert "quantization report" in text and "per-layer sensitivity" in text
    assert "input 3 x 32 x 32; preprocessing (data config)" in text
    assert "peak memory (RSS) of the run: " in text
    report = json.load(open(out))
    assert report["input_size"] == [3, 32, 32]
    assert 0 < report["peak_rss_mb"] < 1e5
    assert {"model", "method", "rows", "worst_layers", "sensitivity", "ptq", "qat"} <= set(report)
    assert [r["model"] for r in report["rows"]] == ["float", "ptq", "qat"]
    for row in report["rows"]:
        assert {"top1", "top5", "drop", "ms_batch1", "ms_batch2", "size_kb"} <= set(row)
    assert report["qat"]["iterations"] == 3 and report["ptq"]["calib_batches"] == 2
    assert all(r["layer"] and r["sqnr_db"] > 0 for r in report["sensitivity"]["ptq"])
    assert report["rows"][1]["size_kb"] < report["rows"][0]["size_kb"]


@pytest.mark.parametrize("trace", [False, True])
def test_bench_int8_runs(tmp_path, trace):
    assert cli.main(["bench", "model=shapesnet", "precision=int8", "batch=2", f"trace={trace}",
                     "input_size=[3,32,32]", "repeats=2", f"out={tmp_path}/b.json"]) == 0
    result = json.load(open(tmp_path / "b.json"))
    assert result["precision"] == "int8" and result["traced"] is trace


@pytest.mark.parametrize("config", ["train", "quantize"])
def test_every_configured_qconfig_is_a_preset(config):
    for name in options("experiment"):
        qconfig = compose(config, [f"experiment={name}"]).quant.get("qconfig")
        if qconfig:
            assert isinstance(getattr(Q, f"{qconfig}_qconfig"), Q.QConfig), (name, qconfig)
    with pytest.raises(ValueError, match="ema_fakequant"):
        prepare_qat(zoo.get_model("resnet18", num_classes=2), "default")


def test_keep_float_leaves_named_layers_float_and_the_model_alone():
    model = zoo.get_model("shapesnet", num_classes=3)
    qat = prepare_qat(model, "calibration", ["fc"])
    assert type(qat.fc) is nn.Linear
    assert isinstance(qat.features[0][0], nn.qat.ConvBnReLU2d)   # the others are QAT layers
    assert "quant_disabled" not in model.fc.__dict__       # the caller's float model unmarked
    with pytest.raises(ValueError, match="keep_float.*'nope'.*top-level modules: .*fc"):
        prepare_qat(model, "calibration", ["nope"])


def test_quantize_keep_float_from_the_command_line(shapes_root, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "experiment=smoke_shapesnet", f"data.root={shapes_root}",
                     f"out_dir={run}", "trainer.max_iters=4", "trainer.eval_every=0",
                     "trainer.progress=false"]) == 0
    out = tmp_path / "quant.json"
    common = ["quantize", "model=shapesnet", "data=shapes", f"data.root={shapes_root}",
              f"weights={run}/model_final.safetensors", "method=both", "calib_batches=2",
              "qat.iters=2", "trainer.progress=false", f"out_dir={tmp_path}/qat",
              "report.repeats=1", "report.batches=[1]", "report.sensitivity_images=4"]
    assert cli.main(common + [f"out={out}"]) == 0
    assert cli.main(common + ["quant.keep_float=[fc]", f"out={tmp_path}/kept.json",
                              f"export.dir={tmp_path}/export"]) == 0
    plain, kept = json.load(open(out)), json.load(open(tmp_path / "kept.json"))
    assert kept["keep_float"] == ["fc"] and "keep_float" not in plain
    for method in ("ptq", "qat"):
        assert "fc" in {r["layer"] for r in plain["sensitivity"][method]}
        assert "fc" not in {r["layer"] for r in kept["sensitivity"][method]}
    sizes = [{r["model"]: r["size_kb"] for r in d["rows"]} for d in (plain, kept)]
    assert sizes[1]["ptq"] > sizes[0]["ptq"] and sizes[1]["qat"] > sizes[0]["qat"]
    # the exported graphs run the float fc after a dequantize step of their own (a graph
    # file holds no hooks)
    graph = ty.runtime.load(tmp_path / "export" / "qat.graph")
    assert [(s.type, s.native) for s in graph.steps if s.name.startswith("fc")] == [
        ("DequantStub", True), ("Linear", False)]
    x = np.random.default_rng(0).standard_normal((3,) + graph.input_specs[0][0][1:])
    assert graph(x.astype(np.float32)).shape == (3, 10)


def test_keep_float_mid_network_is_quantized_again_after(shapes_root, tmp_path):
    """A layer kept float between int8 ones (train's QAT and quantize's PTQ): its input
    dequantized, its output quantized again for the int8 layer after it (a QuantStub at the
    scale calibration observed), no 'float layer feeding an int8 one' error."""
    run = tmp_path / "run"
    assert cli.main(["train", "experiment=smoke_shapesnet", f"data.root={shapes_root}",
                     f"out_dir={run}", "trainer.max_iters=4", "trainer.eval_every=0",
                     "trainer.progress=false"]) == 0
    out = tmp_path / "kept.json"
    assert cli.main(["quantize", "model=shapesnet", "data=shapes", f"data.root={shapes_root}",
                     f"weights={run}/model_final.safetensors", "method=both", "calib_batches=2",
                     "qat.iters=2", "trainer.progress=false", f"out_dir={tmp_path}/qat",
                     "report.repeats=1", "report.batches=[1]", "report.sensitivity_images=4",
                     "quant.keep_float=[features.2]", f"out={out}"]) == 0
    kept = json.load(open(out))
    assert kept["keep_float"] == ["features.2"]
    for method in ("ptq", "qat"):
        layers = {r["layer"] for r in kept["sensitivity"][method]}
        # features.2 became Sequential(the float block, QuantStub): only the stub is int8
        assert "features.4.0" in layers
        assert {n for n in layers if n.startswith("features.2")} == {"features.2.1"}
