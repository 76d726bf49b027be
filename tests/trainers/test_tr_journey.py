"""The small-image folder journey as a new user types it, each command a process of its own
with DataLoader workers and its output going to a log (not a terminal): train -> eval ->
quantize method=both with export -> run the exported graph. Every phase shows progress and
every command exits 0 within its time."""
import json
import subprocess
import sys

import numpy as np

from tianyuan.trainers.classification import shapes_folder

TIMEOUT = 240   # seconds a command; the whole journey takes about a minute on 2 cores


def _tianyuan(*args, cwd):
    run = subprocess.run([sys.executable, "-m", "tianyuan.trainers.cli", *args], cwd=cwd,
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    return run.stdout + run.stderr


def test_small_image_folder_journey(tmp_path):
    root = shapes_folder(str(tmp_path / "my_data"), num_per_class=8, val_per_class=3, size=32,
                         num_classes=10, seed=0)
    data = [f"data.root={root}", "data.num_workers=2", "data.batch_size=16"]
    said = _tianyuan("train", "experiment=resnet18_folder_small", *data, "out_dir=run",
                     "trainer.max_epochs=1", "trainer.log_every=1", cwd=tmp_path)
    assert "train: 100% 5/5 it" in said
    weights = str(tmp_path / "run" / "best.safetensors")

    said = _tianyuan("eval", "model=resnet18", "model.small_input=true", "data=folder_small",
                     *data, f"weights={weights}", "out=eval.json", cwd=tmp_path)
    assert "eval: 10 classes, from the weights" in said and "eval classification: 100%" in said
    assert json.load(open(tmp_path / "eval.json"))["images"] == 30

    said = _tianyuan("quantize", "model=resnet18", "model.small_input=true",
                     "data=folder_small", *data, f"weights={weights}", "method=both",
                     "calib_batches=2", "qat.iters=2", "out_dir=qat", "report.repeats=1",
                     "report.batches=[1]", "report.sensitivity_images=4", "out=quant.json",
                     "export.dir=export", cwd=tmp_path)
    for phase in ("calibrate: 100%", "train: 100% 2/2", "time float and int8: 100%",
                  "evaluate, per-layer SQNR: 100%", "input 3 x 32 x 32"):
        assert phase in said, phase
    rows = json.load(open(tmp_path / "quant.json"))["rows"]
    assert [r["model"] for r in rows] == ["float", "ptq", "qat"]

    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    said = _tianyuan("run", "export/qat.graph", "--input", "x.npy", cwd=tmp_path)
    assert "float32[1, 10]" in said
