"""`tianyuan quantize` for tasks other than classification: the task gives the calibration
batches' forward (its evaluator's), the report's metric and direction, and what is timed
(a detector's network on a normalised batch)."""
import json

import numpy as np

import tianyuan as ty
from tianyuan import nn, zoo
from tianyuan import quantization as Q
from tianyuan.evaluation import sqnr_db
from tianyuan.trainers import cli
from tianyuan.weights import save_weights

# the zoo's RetinaNet (ResNet-18, 16 FPN channels) at 64 pixels, as in test_tr_detection.py
RETINANET = ["model.fpn_channels=16", "model.min_size=64", "model.max_size=64",
             "data.batch_size=4", "data.val_batch_size=8"]


def retinanet(path=None):
    """The test's RetinaNet with its head's weights at 10x their initial scale: a trained
    head's activations. (The initial std 0.01 through five convs leaves activations near 1e-5:
    the logits' bias prior, -4.6, is then past int32 in the accumulator's units and clipped,
    with a warning, so that int8 differs from fake quant: a case of untrained models.)"""
    model = zoo.get_model("retinanet_small", num_classes=3, fpn_channels=16, min_size=64,
                          max_size=64)
    for module in model.head.modules():
        if isinstance(module, nn.Conv2d):
            module.weight.data *= 10.0
    if path is not None:
        save_weights(model.state_dict(), path)
    return model.eval()


def test_quantize_a_detector_reports_box_ap(shapes_det_root, tmp_path, capsys):
    out, weights = tmp_path / "quant.json", tmp_path / "retinanet.safetensors"
    retinanet(weights)
    assert cli.main(["quantize", "experiment=smoke_detection", f"data.root={shapes_det_root}",
                     *RETINANET, f"weights={weights}", "method=both", "calib_batches=2", "qat.iters=2",
                     "trainer.progress=false", f"out_dir={tmp_path}/qat", "report.repeats=1",
                     "report.batches=[1]", "report.sensitivity_images=2", f"out={out}"]) == 0
    text = capsys.readouterr().out
    assert "quantization report" in text and "AP50" in text and "top1" not in text
    report = json.load(open(out))
    assert report["metric"] == "AP" and report["better"] == "higher"
    assert report["input_size"] == [3, 64, 64]
    assert [r["model"] for r in report["rows"]] == ["float", "ptq", "qat"]
    for row in report["rows"]:
        assert {"AP", "AP50", "AP75", "drop", "ms_batch1", "size_kb"} <= set(row)
        assert row["drop"] == round(report["rows"][0]["AP"] - row["AP"], 4)
    assert report["rows"][1]["size_kb"] < report["rows"][0]["size_kb"] / 3
    assert report["sensitivity"]["ptq"] and report["rows"][1]["output_sqnr_db"] > 10


def test_int8_retinanet_network_equals_its_fake_quant_model():
    model = retinanet()
    rng = np.random.default_rng(0)
    images = [rng.random((3, 64, 64)).astype(np.float32) for _ in range(2)]
    fake = Q.calibrate(Q.quantize_qat(model, Q.get_qconfig("calibration")), [images],
                       forward=lambda m, batch: m(batch))
    int8 = Q.quantize(fake)
    x = ty.tensor(model.transform(images)[0])
    with ty.no_grad():
        want = fake.run_network(x)
        got = int8.run_network(x)
    steps = (int8.head.classification_head.cls_logits.out_scale,
             int8.head.regression_head.bbox_reg.out_scale)
    for step, want_maps, got_maps in zip(steps, want, got):
        a = np.concatenate([m.numpy().ravel() for m in want_maps])
        b = np.concatenate([m.numpy().ravel() for m in got_maps])
        # fake quant computes in float, int8 in int32 with a rounding per layer, and the steps
        # add up over ~30 layers (the classifiers' test, test_quant_zoo, asks for the same
        # class): each head's maps within a few steps and 30 dB of fake quant
        assert np.abs(a - b).max() <= 3.01 * step and sqnr_db(a, b) > 30, (
            np.abs(a - b).max() / step, sqnr_db(a, b))


def test_quantize_a_gan_reports_fid_of_the_int8_generator(shapes_root, tmp_path, monkeypatch,
                                                          capsys):
    from test_tr_gan import fake_fid
    fake_fid(monkeypatch)
    out = tmp_path / "quant.json"
    assert cli.main(["quantize", "experiment=smoke_gan", f"data.root={shapes_root}",
                     "model.ngf=8", "model.ndf=8", "data.batch_size=16", "method=both",
                     "calib_batches=2", "qat.iters=2", "task.fid.stats=real.npz",
                     "task.fid.samples=32", "task.fid.batch=16", "trainer.progress=false",
                     f"out_dir={tmp_path}/qat", "report.repeats=1", "report.batches=[1]",
                     "report.sensitivity_images=4", f"out={out}"]) == 0
    assert "fid" in capsys.readouterr().out
    report = json.load(open(out))
    assert report["metric"] == "fid" and report["better"] == "lower"
    assert report["input_size"] == [128]                      # noise vectors
    rows = report["rows"]
    assert [r["model"] for r in rows] == ["float", "ptq", "qat"]
    for row in rows:
        assert row["drop"] == round(row["fid"] - rows[0]["fid"], 4)    # FID's rise
    assert rows[1]["size_kb"] < rows[0]["size_kb"]
    assert report["sensitivity"]["ptq"]               # the generator's int8 layers
    assert all(r["layer"].startswith("generator.") for r in report["sensitivity"]["ptq"])


def test_quantize_a_pose_model_reports_oks_ap(people_root, tmp_path, capsys):
    out = tmp_path / "quant.json"
    assert cli.main(["quantize", "experiment=smoke_pose", f"data.root={people_root}",
                     "data.batch_size=8", "method=ptq", "calib_batches=2",
                     "trainer.progress=false", "trainer.num_threads=1", "report.repeats=1",
                     "report.batches=[1]", "report.sensitivity_images=4", f"out={out}"]) == 0
    assert "AP50" in capsys.readouterr().out
    report = json.load(open(out))
    assert report["metric"] == "AP" and report["input_size"] == [3, 64, 64]
    assert [r["model"] for r in report["rows"]] == ["float", "ptq"]
    layers = {r["layer"] for r in report["sensitivity"]["ptq"]}
    assert any(name.startswith("deconv_layers") for name in layers)     # int8 ConvTranspose2d
    assert report["rows"][1]["size_kb"] < report["rows"][0]["size_kb"] / 3


def test_quantize_faster_rcnn_runs_its_layers_int8(shapes_det_root, tmp_path):
    out = tmp_path / "quant.json"
    assert cli.main(["quantize", "experiment=smoke_detection", "model=fasterrcnn_small",
                     f"data.root={shapes_det_root}", "model.min_size=64", "model.max_size=64",
                     "data.batch_size=4", "data.val_batch_size=8", "method=ptq",
                     "calib_batches=2", "trainer.progress=false", "report.repeats=1",
                     "report.batches=[1]", "report.sensitivity_images=2", f"out={out}"]) == 0
    report = json.load(open(out))
    layers = {r["layer"] for r in report["sensitivity"]["ptq"]}
    assert report["rows"][1]["output_sqnr_db"] is None      # over proposals of its own
    assert {"rpn.head.conv.0.0", "roi_heads.box_head.fc6", "roi_heads.box_predictor.cls_score",
            "backbone.fpn.layer_blocks.0.0"} <= layers
    assert report["rows"][1]["size_kb"] < report["rows"][0]["size_kb"] / 3
