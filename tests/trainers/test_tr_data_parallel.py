"""`mpiexec -n 2` training: the processes stay equal, process 0 alone writes, and a stop
that reaches one process stops both after the same step."""
import json
import os

import pytest

from helpers import mpi_run
from tr_helpers import smoke_cfg

import tianyuan as ty
from tianyuan.trainers.checkpoint import find_latest
from tianyuan.trainers.engine import EvalHook
from tianyuan.trainers.train import build


_CHILD = """
import json, sys
import numpy as np
sys.path.insert(0, {here!r})
from tr_helpers import smoke_cfg
from tianyuan import distributed as dist
from tianyuan.trainers.train import build

class StopOne:  # a signal that reached process 1 only, after step 4
    every_process = True
    def after_step(self):
        if dist.rank() == 1 and self.trainer.iter == 4:
            self.trainer.stop_requested = True

trainer = build(smoke_cfg({root!r}, {out!r}, "data.batch_size=16", "trainer.max_iters=6",
                         *{extra!r}))
if {stop!r}:
    hook = StopOne(); hook.trainer = trainer; trainer.hooks.append(hook)
trainer.train()
w = np.concatenate([p.data.ravel() for p in trainer.model.parameters()])
gap = np.array([np.abs(w - dist.broadcast(w.copy())).max()])
dist.all_reduce(gap)
if dist.is_main():
    with open({out!r} + "/dp.json", "w") as f:
        json.dump({{"iter": trainer.iter, "stopped": trainer.stop_requested,
                   "gap": float(gap[0]), "world": dist.world_size(),
                   "metrics": trainer.metrics}}, f)
"""


def _run(shapes_root, out, stop, *extra):
    code = _CHILD.format(here=os.path.dirname(__file__), root=shapes_root, out=str(out),
                         stop=stop, extra=extra)
    mpi_run(2, ["-c", code])
    with open(out / "dp.json") as f:
        return json.load(f)


@pytest.mark.parametrize("extra", [(), ("quant=qat",), ("trainer.sync_bn=true",)],
                         ids=["float", "qat", "sync_bn"])
def test_two_processes_train_as_one(shapes_root, tmp_path, extra):
    result = _run(shapes_root, tmp_path, False, *extra)
    metrics = result.pop("metrics")
    assert result == {"iter": 6, "stopped": False, "gap": 0.0, "world": 2}
    # each process evaluated its share with process 0's statistics (batch norm's, the
    # observers'): the sums are one process's score of the whole set
    trainer = build(smoke_cfg(shapes_root, str(tmp_path / "check"), *extra))
    trainer.model.load_state_dict(ty.load(str(tmp_path / "model_final.safetensors")))
    hook = next(h for h in trainer.hooks if isinstance(h, EvalHook))
    assert hook.evaluate(trainer.model.eval()) == metrics
    with open(tmp_path / "log.jsonl") as f:
        steps = [json.loads(line)["iter"] for line in f if '"images_per_s"' in line]
    assert steps == [5, 6]   # log_every 5 and the last step, written once
    assert os.path.exists(tmp_path / "model_final.safetensors")


def test_a_stop_reaching_one_process_stops_both_after_the_same_step(shapes_root, tmp_path):
    result = _run(shapes_root, tmp_path, stop=True)
    result.pop("metrics")
    assert result == {"iter": 5, "stopped": True, "gap": 0.0, "world": 2}
    assert find_latest(str(tmp_path / "checkpoints")).endswith("ckpt_00000005.safetensors")
    assert not os.path.exists(tmp_path / "model_final.safetensors")


def test_a_data_parallel_run_resumed_ends_bit_identical(shapes_root, tmp_path):
    def train(out, *extra):
        mpi_run(2, ["-m", "tianyuan.trainers.cli", "train", "experiment=smoke_shapesnet",
                    f"data.root={shapes_root}", f"out_dir={out}", "data.batch_size=16",
                    "trainer.progress=false", "trainer.checkpoint_every=4", *extra])

    train(tmp_path / "whole", "trainer.max_iters=12")
    train(tmp_path / "parts", "trainer.max_iters=6")     # ends at 6: checkpoints at 4 and 6
    train(tmp_path / "parts", "trainer.max_iters=12", "trainer.resume=true")
    whole, parts = (ty.load(str(tmp_path / d / "model_final.safetensors"))
                    for d in ("whole", "parts"))
    assert list(whole) == list(parts)
    for key in whole:
        assert (whole[key] == parts[key]).all(), key


def test_eval_in_two_processes_scores_each_image_once(shapes_root, tmp_path):
    from tianyuan.trainers import cli
    from tianyuan.zoo import registry
    ty.manual_seed(3)
    ty.save(registry.get_model("shapesnet").state_dict(), str(tmp_path / "w.safetensors"))
    args = ["eval", "model=shapesnet", "data=shapes", f"data.root={shapes_root}",
            f"weights={tmp_path / 'w.safetensors'}", "progress=false", "data.val_batch_size=7"]
    assert cli.main(args + [f"out={tmp_path / 'one.json'}"]) == 0
    mpi_run(2, ["-m", "tianyuan.trainers.cli", *args, f"out={tmp_path / 'two.json'}"])
    one, two = (json.load(open(tmp_path / f"{n}.json")) for n in ("one", "two"))
    assert (two["processes"], one["processes"]) == (2, 1)
    assert {k: two[k] for k in ("top1", "top5", "images")} == \
        {k: one[k] for k in ("top1", "top5", "images")}
    assert 0 < one["top1"] < 100


_DROPPING = """
import numpy as np
import tianyuan as ty
from tianyuan import distributed as dist
from tianyuan.datasets import DataLoader, DistributedSampler
from tianyuan.trainers.engine import Trainer
from tianyuan.trainers.task import LossTask

class Data:  # process 1 finds two unreadable items, one whole batch of its share
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return None if i in (1, 3) else {{"image": np.full((2,), i, np.float32)}}

model = ty.nn.Linear(2, 1)
share = DistributedSampler(Data(), dist.rank(), 2, shuffle=False)
loader = DataLoader(Data(), batch_size=2, sampler=share, seed=0)
task = LossTask(lambda m, b: {{"loss": (m(ty.tensor(b["image"])) ** 2).mean()}})
trainer = Trainer(task, model, ty.optim.SGD(model.parameters(), lr=0.01), loader,
                  max_epochs=2, out_dir={out!r}, progress=False)
trainer.train()
"""


def test_a_batch_dropped_in_one_process_stops_the_run(tmp_path):
    run = mpi_run(2, ["-W", "ignore", "-c", _DROPPING.format(out=str(tmp_path))], timeout=120,
                  ok=False)
    assert run.returncode != 0
    assert "process 1's loader dropped 1 batch(es) of epoch 1" in run.stderr
