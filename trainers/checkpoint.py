"""Checkpoints: every random state a run depends on, and the hook that writes them.

A checkpoint is one `tianyuan.save` file (atomic: temp file, fsync, rename), so a run
killed at any moment leaves the previous checkpoint intact; the partial temp file a kill
leaves (`.ckpt_<iteration>.safetensors.<random>.tmp`) is removed at the next start. Files
are `out_dir/checkpoints/ckpt_<iteration, 8 digits>.safetensors`; the last `keep_last`
are kept. Contents (see Trainer.state_dict): model, optimizer, scheduler (as hook
state), iteration/epoch counters, the data-order state (seed, epoch, batches done),
the framework, numpy, Python and transform RNG states, and the run's config.
"""
import os
import random
import re

import numpy as np

import tianyuan as ty
from tianyuan.datasets.transforms import random as transform_random

_NAME = re.compile(r"^ckpt_(\d{8})\.safetensors$")
_PARTIAL = re.compile(r"^\.ckpt_\d{8}\.safetensors\..+\.tmp$")   # tianyuan.save's temp files


def capture_rng():
    """The state of every generator training may draw from."""
    return {"tianyuan": ty.get_rng_state(), "numpy": np.random.get_state(),
            "python": random.getstate(),
            "transforms": transform_random.get_rng().bit_generator.state}


def restore_rng(state):
    ty.set_rng_state(state["tianyuan"])
    np.random.set_state(tuple(state["numpy"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    # set in place: the transforms' default generator is the object get_rng() returns
    transform_random.get_rng().bit_generator.state = state["transforms"]


def list_checkpoints(folder):
    """[(iteration, path)] of the checkpoints in `folder`, oldest first."""
    if not os.path.isdir(folder):
        return []
    found = [(int(m.group(1)), os.path.join(folder, name))
             for name in os.listdir(folder) if (m := _NAME.match(name))]
    return sorted(found)


def remove_partial(folder):
    """Remove the temp files of checkpoint writes that were killed; returns their paths."""
    if not os.path.isdir(folder):
        return []
    partial = [os.path.join(folder, name) for name in os.listdir(folder) if _PARTIAL.match(name)]
    for path in partial:
        os.unlink(path)
    return partial


def find_latest(folder):
    found = list_checkpoints(folder)
    return found[-1][1] if found else None


def model_weights(obj):
    """The model state dict inside a checkpoint/best file, or `obj` itself if it is flat."""
    return obj["model"] if isinstance(obj, dict) and isinstance(obj.get("model"), dict) else obj


class CheckpointHook:
    """Writes a checkpoint every `every` iterations, at epoch ends, when the run stops on a
    signal and when it ends; keeps the newest `keep_last`. At the end it also writes
    `out_dir/model_final.safetensors` (weights only)."""

    def __init__(self, every=1000, keep_last=3):
        if keep_last < 1:
            raise ValueError(f"CheckpointHook: keep_last must be >= 1, got {keep_last}")
        self.every, self.keep_last = every, keep_last
        self.trainer = None

    @property
    def folder(self):
        return os.path.join(self.trainer.out_dir, "checkpoints")

    def save(self):
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"ckpt_{self.trainer.iter:08d}.safetensors")
        ty.save(self.trainer.state_dict(), path)
        for _, old in list_checkpoints(self.folder)[:-self.keep_last]:
            os.unlink(old)
        return path

    def before_train(self):
        for path in remove_partial(self.folder):
            self.trainer.write(f"checkpoint: removed {path}, left by a write that was killed")

    def after_step(self):
        if self.every and self.trainer.iter % self.every == 0:
            self.save()

    def after_epoch(self):
        self.save()

    def on_stop(self):
        path = self.save()
        self.trainer.write(f"checkpoint: {path}; continue with trainer.resume=true")

    def after_train(self):
        self.save()
        ty.save(self.trainer.model.state_dict(),
                os.path.join(self.trainer.out_dir, "model_final.safetensors"))
