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
