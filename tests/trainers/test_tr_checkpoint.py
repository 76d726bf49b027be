"""Checkpoint files: atomic writes, keep-last pruning, RNG round trip; resume's batch skipping."""
import os
import random

import numpy as np
import pytest

import tianyuan as ty
from tianyuan.datasets import DataLoader
from tianyuan.datasets.transforms import get_rng
from tianyuan.trainers.checkpoint import (CheckpointHook, capture_rng, list_checkpoints,
                                          restore_rng)
from tianyuan.trainers.engine import _SkipFirst


class _FakeTrainer:
    def __init__(self, out_dir):
        self.out_dir, self.iter, self.value = out_dir, 0, 0

    def state_dict(self):
        return {"iter": self.iter, "weights": np.full(4, self.value, np.float32)}

    def write(self, message):
        pass


def test_keep_last_and_atomic_write(tmp_path, monkeypatch):
    trainer = _FakeTrainer(str(tmp_path))
    hook = CheckpointHook(every=2, keep_last=2)
    hook.trainer = trainer
    for step in range(1, 8):
        trainer.iter, trainer.value = step, step
        hook.after_step()
    assert [i for i, _ in list_checkpoints(hook.folder)] == [4, 6]
    # a crash while writing the next checkpoint leaves the newest one whole and no temp file
    trainer.iter = 8

    def crash(*args):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        hook.after_step()
    monkeypatch.undo()
    assert sorted(os.listdir(hook.folder)) == ["ckpt_00000004.safetensors",
                                               "ckpt_00000006.safetensors"]
    assert ty.load(list_checkpoints(hook.folder)[-1][1])["weights"][0] == 6


def test_a_killed_writes_temp_file_is_removed_at_the_next_start(tmp_path, monkeypatch):
    trainer = _FakeTrainer(str(tmp_path))
    hook = CheckpointHook(every=1)
    hook.trainer = trainer
    trainer.iter = 1
    hook.after_step()
    # killed between writing and renaming: the temp file stays (no cleanup runs on SIGKILL)
    class Killed(BaseException):
        pass

    def killed(*args):
        raise Killed
    trainer.iter = 2
    monkeypatch.setattr(os, "replace", killed)
    monkeypatch.setattr(os, "unlink", lambda path: None)
    with pytest.raises(Killed):
        hook.after_step()
    monkeypatch.undo()
    assert len(os.listdir(hook.folder)) == 2
    hook.before_train()
    assert os.listdir(hook.folder) == ["ckpt_00000001.safetensors"]


def test_rng_round_trip(tmp_path):
    ty.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    saved = capture_rng()
    ty.save({"rng": saved}, str(tmp_path / "r.safetensors"))
    first = (ty.randn(3).numpy(), np.random.rand(3), random.random(), get_rng().random())
    restore_rng(ty.load(str(tmp_path / "r.safetensors"))["rng"])
    again = (ty.randn(3).numpy(), np.random.rand(3), random.random(), get_rng().random())
    for a, b in zip(first, again):
        assert np.array_equal(a, b)


class _Noisy:
    """Items whose value depends on the transform RNG: augmentation must match too."""

    def __len__(self):
        return 20

    def __getitem__(self, index):
        return {"image": np.array([index, get_rng().random()]), "label": index}


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_skip_first_keeps_batch_numbers(workers):
    loader = DataLoader(_Noisy(), batch_size=3, shuffle=True, seed=5, num_workers=workers,
                        drop_last=True)
    loader.set_epoch(2)
    full = [b["image"] for b in loader]
    loader.set_epoch(2)
    loader.batch_sampler = _SkipFirst(loader.batch_sampler, 4)
    rest = [b["image"] for b in loader]
    loader.close()
    assert len(rest) == len(full) - 4
    for a, b in zip(full[4:], rest):
        assert np.array_equal(a, b)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # inf * 0 in the data
def test_a_nan_loss_stops_training_before_the_step(tmp_path):
    from tianyuan.trainers.engine import Trainer
    from tianyuan.trainers.task import LossTask
    model = ty.nn.Linear(2, 1)
    data = [{"image": np.ones((2, 2), np.float32) * (np.inf if i == 2 else 1.0)}
            for i in range(4)]

    class Loader(list):
        batch_sampler = None

        def set_epoch(self, epoch):
            pass

    def forward(m, batch):
        return {"loss_mse": (m(ty.tensor(batch["image"])) ** 2).mean()}

    trainer = Trainer(LossTask(forward), model, ty.optim.SGD(model.parameters(), lr=0.1),
                      Loader(data), max_epochs=1, out_dir=str(tmp_path), progress=False)
    before = {}

    def remember(m, batch):
        before.update({k: np.array(v, copy=True) for k, v in model.state_dict().items()})
        return forward(m, batch)
    trainer.task = LossTask(remember)
    with pytest.raises(FloatingPointError, match=r"loss is (inf|nan) at iteration 3 .*loss_mse"):
        trainer.train()
    for name, value in model.state_dict().items():  # the weights of the step before
        np.testing.assert_array_equal(value, before[name])
    assert np.isfinite(model.weight.numpy()).all()


def test_an_epoch_with_a_dropped_batch_ends(tmp_path):
    """A batch whose every item the dataset skipped (None) takes no step; the epoch used to
    wait for a step that never came (an endless loop of empty epochs)."""
    from tianyuan.datasets import DataLoader
    from tianyuan.trainers.engine import Trainer
    from tianyuan.trainers.task import LossTask
    from tianyuan.trainers.task import LossTask

    class Data:
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return None if i in (2, 3) else {"image": np.full((2,), i, np.float32)}

    model = ty.nn.Linear(2, 1)
    loader = DataLoader(Data(), batch_size=2, seed=0)   # batch 1 is items 2 and 3
    task = LossTask(lambda m, b: {"loss": (m(ty.tensor(b["image"])) ** 2).mean()})
    trainer = Trainer(task, model, ty.optim.SGD(model.parameters(), lr=0.01), loader,
                      max_epochs=2, out_dir=str(tmp_path), progress=False)
    with pytest.warns(RuntimeWarning, match="2 items were skipped"):
        trainer.train()
    assert (trainer.epoch, trainer.iter) == (2, 6)
