"""Commands with DataLoader workers end: after their work, after Ctrl-C (SIGINT to the whole
process group, as a terminal sends it), quietly and with a non-zero status when interrupted.
Each runs in a process group of its own that is killed past its timeout (helpers.bounded_run).
"""
import json
import os
import signal
import time

from helpers import bounded_run

# `tianyuan quantize` with one change: a full collection once QAT returns, as the report's
# allocations set off in a bigger run; it frees the QAT trainer (a cycle with its hooks) and
# with it the persistent train loader, whose workers were started under the trainer's handler
COLLECT_AFTER_QAT = """
import gc, sys
from tianyuan.trainers import cli, quantize
train_qat = quantize.qat

def qat_then_collect(cfg, model):
    result = train_qat(cfg, model)
    gc.collect()
    return result

quantize.qat = qat_then_collect
sys.exit(cli.main(sys.argv[1:]))
"""


def quantize_args(root, tmp_path, *overrides):
    """`tianyuan quantize method=both` of an untrained shapesnet on a folder dataset with two
    workers: a few batches of 32x32 images."""
    return ["quantize", "model=shapesnet", "data=folder", f"data.root={root}",
            "data.num_workers=2", "data.batch_size=8", "data.image_size=32", "data.resize=null",
            "data.augment=flip", "preprocessing=data", "method=both", "calib_batches=2",
            f"out_dir={tmp_path}/qat", "report.repeats=1", "report.batches=[1]",
            "report.sensitivity_images=4", f"out={tmp_path}/quant.json", *overrides]


def ctrl_c_after(path, seconds=60):
    """poke: SIGINT to the process group once `path` exists (the run is under way)."""
    def poke(process):
        deadline = time.monotonic() + seconds
        while not os.path.exists(path) and process.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
    return poke


def test_quantize_both_with_workers_exits(shapes_root, tmp_path):
    # issue 55: every file written, then the process waited for ever for workers that took
    # SIGTERM for the trainer's "stop after this step"
    run, _ = bounded_run(["-c", COLLECT_AFTER_QAT, *quantize_args(
        shapes_root, tmp_path, "qat.iters=3", "trainer.progress=false")], timeout=90)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "SIGTERM" not in run.stdout + run.stderr
    assert [row["model"] for row in json.load(open(tmp_path / "quant.json"))["rows"]] == \
        ["float", "ptq", "qat"]


def test_ctrl_c_stops_train_once_with_status_130(shapes_root, tmp_path):
    run, _ = bounded_run(
        ["-m", "tianyuan.trainers.cli", "train", "experiment=smoke_shapesnet",
         f"data.root={shapes_root}", f"out_dir={tmp_path}", "data.num_workers=2",
         "trainer.max_epochs=100", "trainer.log_every=1"],
        timeout=90, poke=ctrl_c_after(tmp_path / "log.jsonl"))
    assert run.returncode == 130, run.stderr[-3000:]
    # the main process stops after its step; the workers print nothing (they used to run
    # the trainer's handler too: one message each)
    assert run.stdout.count("SIGINT: stopping after this step") == 1, run.stdout[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert os.listdir(tmp_path / "checkpoints")


def test_ctrl_c_interrupts_quantize_with_status_130(shapes_root, tmp_path):
    # issue 55: one Ctrl-C during QAT printed the workers' tracebacks, then the report, and
    # exited 0
    run, _ = bounded_run(
        ["-m", "tianyuan.trainers.cli", *quantize_args(
            shapes_root, tmp_path, "qat.epochs=50", "trainer.log_every=1")],
        timeout=90, poke=ctrl_c_after(tmp_path / "qat" / "log.jsonl"))
    assert run.returncode == 130, run.stderr[-3000:]
    assert "tianyuan quantize: interrupted" in run.stderr
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert not os.path.exists(tmp_path / "quant.json")
