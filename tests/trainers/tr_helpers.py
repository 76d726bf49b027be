"""Shared bits of the trainer tests: the small smoke config and a state-dict comparison."""
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
