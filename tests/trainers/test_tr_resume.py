"""A run stopped mid-way and resumed ends bit-identical to an uninterrupted one."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from tr_helpers import assert_same_state, smoke_cfg

import tianyuan as ty
from tianyuan.trainers.checkpoint import find_latest, list_checkpoints
from tianyuan.trainers.train import build


class _Crash(Exception):
    pass


class _At:
    """A hook that calls `action` after step `k` (a crash or a signal)."""

    def __init__(self, k, action):
        self.k, self.action, self.trainer = k, action, None

    def after_step(self):
        if self.trainer.iter == self.k:
            self.action()


@pytest.fixture(scope="module")
def reference(shapes_root, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ref"))
    trainer = build(smoke_cfg(shapes_root, out))
    trainer.train()
    return trainer


def _fresh(shapes_root, out, extra_hook=None):
    trainer = build(smoke_cfg(shapes_root, out))
    if extra_hook is not None:
        extra_hook.trainer = trainer
        trainer.hooks.append(extra_hook)
    return trainer


def _raise():
    raise _Crash("killed in a hook")


def test_crash_then_resume_is_bit_identical(reference, shapes_root, tmp_path):
    crashing = _fresh(shapes_root, str(tmp_path), _At(13, _raise))   # mid epoch 2
    with pytest.raises(_Crash):
        crashing.train()
    assert [i for i, _ in list_checkpoints(str(tmp_path / "checkpoints"))] == [5, 9, 10]
    resumed = _fresh(shapes_root, str(tmp_path))
    resumed.train(resume=True)
    assert resumed.iter == reference.iter == 27
    assert_same_state(resumed.model.state_dict(), reference.model.state_dict())
    ref_opt = reference.optimizers["main"].state_dict()["state"]
    for key, state in resumed.optimizers["main"].state_dict()["state"].items():
        assert np.array_equal(state["momentum_buffer"], ref_opt[key]["momentum_buffer"])
    assert resumed.metrics == reference.metrics


def test_sigterm_stops_with_checkpoint_and_resumes(reference, shapes_root, tmp_path):
    stopping = _fresh(shapes_root, str(tmp_path), _At(7, lambda: os.kill(os.getpid(),
                                                                         signal.SIGTERM)))
    stopping.train()
    assert stopping.stop_requested and stopping.iter == 7
    assert find_latest(str(tmp_path / "checkpoints")).endswith("ckpt_00000007.safetensors")
    assert not os.path.exists(tmp_path / "model_final.safetensors")
    resumed = _fresh(shapes_root, str(tmp_path))
    resumed.train(resume=True)
    assert_same_state(resumed.model.state_dict(), reference.model.state_dict())


_CHILD = """
import sys, time
sys.path.insert(0, {here!r})
from tr_helpers import smoke_cfg
from tianyuan.trainers.train import build

class Hang:
    def after_step(self):
        if self.trainer.iter == 13:
            open({marker!r}, "w").close()
            time.sleep(600)

trainer = build(smoke_cfg({root!r}, {out!r}))
hang = Hang(); hang.trainer = trainer; trainer.hooks.append(hang)
trainer.train()
"""


def test_sigkill_subprocess_then_resume(reference, shapes_root, tmp_path):
    marker = str(tmp_path / "at13")
    code = _CHILD.format(here=os.path.dirname(__file__), marker=marker, root=shapes_root,
                         out=str(tmp_path))
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(marker):
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        process.kill()   # SIGKILL: no handler runs, only the files on disk survive
        process.wait()
    assert process.returncode == -signal.SIGKILL
    assert find_latest(str(tmp_path / "checkpoints")).endswith("ckpt_00000010.safetensors")
    resumed = _fresh(shapes_root, str(tmp_path))
    resumed.train(resume=True)
    assert_same_state(resumed.model.state_dict(), reference.model.state_dict())


def _resnet18(out, root):
    """smoke_resnet18 shrunk to 24 images (batch 4: 6 steps an epoch, 2 epochs), AdamW."""
    from tianyuan.trainers.config import compose
    return build(compose("train", [
        "experiment=smoke_resnet18", f"data.root={root}", f"out_dir={out}",
        "data.synthetic.num_per_class=6", "data.synthetic.val_per_class=2", "data.batch_size=4",
        "trainer.max_epochs=2", "trainer.checkpoint_every=5", "trainer.eval_every=0",
        "trainer.progress=false"]))


def test_smoke_resnet18_crash_then_resume_is_bit_identical(tmp_path):
    """The zoo ResNet-18 smoke recipe (AdamW state, BN buffers) resumes bit-identically."""
    root = str(tmp_path / "shapes")
    reference = _resnet18(str(tmp_path / "ref"), root)
    reference.train()
    crashing = _resnet18(str(tmp_path / "run"), root)
    crashing.hooks.append(_At(11, _raise))
    crashing.hooks[-1].trainer = crashing
    with pytest.raises(_Crash):
        crashing.train()
    latest = find_latest(str(tmp_path / "run" / "checkpoints"))
    assert latest.endswith("ckpt_00000010.safetensors")   # mid epoch 2
    resumed = _resnet18(str(tmp_path / "run"), root)
    resumed.train(resume=True)
    assert resumed.iter == reference.iter == 12
    assert_same_state(resumed.model.state_dict(), reference.model.state_dict())


@pytest.mark.parametrize("qconfig", ["ema_fakequant", "lsq"])
def test_qat_crash_then_resume_is_bit_identical(shapes_root, tmp_path, qconfig):
    """A QAT run's checkpoint holds observer ranges and LSQ scales that a freshly prepared
    model has no shape for yet; resuming once failed on them ('unexpected keys')."""
    extra = ("quant=qat", f"quant.qconfig={qconfig}", "trainer.max_epochs=1")
    whole = build(smoke_cfg(shapes_root, str(tmp_path / "whole"), *extra))
    whole.train()
    crashing = build(smoke_cfg(shapes_root, str(tmp_path / "parts"), *extra))
    crashing.hooks.append(_At(7, _raise))
    crashing.hooks[-1].trainer = crashing
    with pytest.raises(_Crash):
        crashing.train()
    resumed = build(smoke_cfg(shapes_root, str(tmp_path / "parts"), *extra))
    resumed.train(resume=True)
    assert resumed.iter == whole.iter == 9
    assert_same_state(resumed.model.state_dict(), whole.model.state_dict())


@pytest.mark.parametrize("batch", [16, 64])
def test_resume_with_another_batch_size_is_refused(shapes_root, tmp_path, batch):
    """32 -> 64 (4 iterations an epoch, the checkpoint at 5 of 9) had looped for ever: the
    epoch's remaining batches were all skipped and the epoch never ended."""
    first = build(smoke_cfg(shapes_root, str(tmp_path), "trainer.max_iters=5"))
    first.train()
    again = build(smoke_cfg(shapes_root, str(tmp_path), f"data.batch_size={batch}"))
    with pytest.raises(ValueError, match=r"9 iterations per epoch .* this run has "
                                         f"{300 // batch}"):
        again.train(resume=True)
