"""Shared bits of the trainer tests: the small smoke config, state comparisons, and a run
killed mid-way and resumed."""
import numpy as np

from tianyuan.trainers.config import compose


def smoke_cfg(shapes_root, out_dir, *overrides):
    """smoke_shapesnet on the 300-image shared tree: 9 iterations per epoch at batch 32."""
    return compose("train", ["experiment=smoke_shapesnet", f"data.root={shapes_root}",
                             f"out_dir={out_dir}", "trainer.progress=false",
                             "trainer.checkpoint_every=5", "trainer.max_epochs=3",
                             *overrides])


def assert_same_state(a, b):
    assert list(a) == list(b)
    for key in a:
        assert np.array_equal(a[key], b[key]), key


class Crash(Exception):
    """Raised by CrashAt: a run killed in the middle of an epoch."""


class CrashAt:
    """A hook that raises Crash after step `k`."""

    def __init__(self, k):
        self.k, self.trainer = k, None

    def after_step(self):
        if self.trainer.iter == self.k:
            raise Crash


def build_with_hooks(cfg, *hooks):
    """train.build(cfg) with `hooks` appended (a crash, a signal)."""
    from tianyuan.trainers import train
    trainer = train.build(cfg)
    for hook in hooks:
        hook.trainer = trainer
        trainer.hooks.append(hook)
    return trainer


def assert_same_optimizers(a, b):
    """Trainers a and b hold equal optimizer states, optimizer by optimizer."""
    assert list(a.optimizers) == list(b.optimizers)
    for name in a.optimizers:
        ours, theirs = a.optimizers[name].state_dict()["state"], \
            b.optimizers[name].state_dict()["state"]
        assert list(ours) == list(theirs), name
        for key in theirs:
            for field, value in theirs[key].items():
                assert np.array_equal(value, ours[key][field]), (name, key, field)


def killed_and_resumed(make_cfg, tmp_path, crash_at):
    """(reference, resumed): a run to the end in tmp_path/ref, and one in tmp_path/run killed
    after step `crash_at` (Crash) then resumed from its last checkpoint to the end;
    `make_cfg(out_dir)` composes each run's config."""
    import pytest
    reference = build_with_hooks(make_cfg(tmp_path / "ref"))
    reference.train()
    killed = build_with_hooks(make_cfg(tmp_path / "run"), CrashAt(crash_at))
    with pytest.raises(Crash):
        killed.train()
    resumed = build_with_hooks(make_cfg(tmp_path / "run"))
    resumed.train(resume=True)
    return reference, resumed
