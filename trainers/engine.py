"""The one training loop every task shares: data -> step -> log -> hooks.

A task (trainers/task.py) supplies `run_step(trainer, batch) -> {name: float}`; its default
is one loss-dict step: `forward(model, batch) -> {name: scalar Tensor}`, every entry whose
name starts with "loss" summed into the loss that is back-propagated (detectron2's loss
dict), the others logged only, through `Trainer.optimize`. A task with several optimizers
(a GAN's critic and generator) calls `optimize(losses, name)` once per optimizer it steps.
The LR schedulers, one per optimizer, step once per iteration. Hooks run before training,
after each step and at epoch ends: periodic evaluation (with best-checkpoint tracking) and
checkpointing.

Epochs or iterations. `max_epochs` bounds an epoch-based run (`max_iters` may stop it
early); with `max_epochs=None` the run counts `max_iters` (COCO recipes count iterations):
the data goes round as an infinite sampler would, each pass re-shuffled as a new epoch,
so the data order stays a pure function of (seed, epoch).

Exact resume. The data order is a pure function of (seed, epoch): the DataLoader's
sampler permutes with default_rng([seed, epoch]) and sample `pos` of batch `b` augments
with a generator seeded by (seed, epoch, b, pos). A checkpoint records how many steps
were taken; on resume the first batches of the epoch are replaced by empty index lists
(the DataLoader drops empty batches without loading anything), so batch numbers, and
with them the augmentation seeds, are those of the uninterrupted run. Together with the
model, every optimizer and scheduler (by name) and the RNG states, a resumed run ends
bit-identical.

Data-parallel. Started by an MPI launcher (`mpiexec -n N tianyuan train ...`), each process
trains on its share of every epoch (the loader's DistributedSampler) and the gradients are
averaged after each backward pass (tianyuan.distributed), so every process takes the same
step. Process 0 alone logs and writes checkpoints; hooks marked `every_process`
(evaluation: each process scores its share) run everywhere. The loss checked for NaN and a
stop asked by a signal are agreed on in the same allreduce, so the processes stop together.

>>> trainer = Trainer(task, model, {"main": optimizer}, loader, max_epochs=2, out_dir="runs/x",
...                   schedulers={"main": scheduler}, hooks=[CheckpointHook(every=100)])
>>> trainer.train(resume=True)                                       # doctest: +SKIP
"""
import json
import os
import random
import signal
import threading
import time

import numpy as np
from tqdm import tqdm

import tianyuan as ty
from tianyuan import distributed as dist
from tianyuan.datasets.transforms import random as transform_random
from tianyuan.progress import progress

from .checkpoint import CheckpointHook, capture_rng, find_latest, restore_rng  # noqa: F401
from .hooks import EvalHook  # noqa: F401


class _SkipFirst:
    """A batch sampler whose first `skip` batches are empty lists: same numbering, no loading."""

    def __init__(self, batch_sampler, skip):
        self.batch_sampler, self.skip = batch_sampler, skip

    def set_epoch(self, epoch):
        if hasattr(self.batch_sampler, "set_epoch"):
            self.batch_sampler.set_epoch(epoch)

    def __iter__(self):
        for number, indices in enumerate(self.batch_sampler):
            yield [] if number < self.skip else indices

    def __len__(self):
        return len(self.batch_sampler)


def _batch_size(batch):
    image = batch.get("image") if isinstance(batch, dict) else batch[0]
    return len(image) if image is not None else 1


class Trainer:
    """Runs `task.run_step` over `loader` for `max_epochs` epochs (or `max_iters` steps, if
    that comes first; `max_epochs=None`: `max_iters` alone), writing `out_dir/log.jsonl`
    and, through the hooks, checkpoints. `optimizers`: {name: Optimizer} (or one
    optimizer, named "main"); `schedulers`: {name: LR scheduler}, stepped every iteration."""

    def __init__(self, task, model, optimizers, loader, max_epochs, out_dir, max_iters=None,
                 schedulers=None, hooks=(), config=None, log_every=10, progress=True):
        self.task, self.model, self.loader = task, model, loader
        self.optimizers = dict(optimizers) if isinstance(optimizers, dict) else \
            {"main": optimizers}
        self.schedulers = dict(schedulers or {})
        self.out_dir, self.config = out_dir, config
        self.iters_per_epoch = len(loader)
        if max_epochs is None:
            if not max_iters:
                raise ValueError("Trainer: give max_epochs, max_iters or both")
            max_epochs = -(-int(max_iters) // max(1, self.iters_per_epoch))   # passes needed
        self.max_epochs = int(max_epochs)
        total = self.max_epochs * self.iters_per_epoch
        self.max_iters = total if max_iters is None else min(int(max_iters), total)
        self.main = dist.is_main()
        self.hooks, self.log_every = list(hooks), int(log_every)
        self.progress = progress and self.main
        self.iter, self.epoch, self.iter_in_epoch = 0, 0, 0   # steps completed
        self.metrics, self.last_losses, self.stop_requested = {}, {}, False
        self._stop_agreed = False
        for hook in self.hooks:
            hook.trainer = self
        os.makedirs(out_dir, exist_ok=True)

    # ------------------------------------------------------------ the loop
    def train(self, resume=False):
        """Train to the end, or until SIGINT/SIGTERM (then `stop_requested` is True and a
        checkpoint was written); returns the last step's losses."""
        self._call("before_train")
        if resume:
            self.resume()
        dist.broadcast_state(self.model)  # the processes start from process 0's weights
        self.model.train()
        self._bar = progress(total=self.max_iters, initial=self.iter, desc="train", unit="it",
                             disable=not self.progress)
        try:
            with _StopOnSignal(self):
                while (self.iter < self.max_iters and self.epoch < self.max_epochs and
                       not self._stopping()):
                    self.train_one_epoch()
        finally:
            self._bar.close()   # also on a second Ctrl-C: its message starts a line
        self.stop_requested = self._stopping()
        if self.stop_requested:
            self._call("on_stop")
        else:
            self._call("after_train")
        return self.last_losses

    def train_one_epoch(self):
        self.loader.set_epoch(self.epoch)
        batch_sampler = self.loader.batch_sampler
        self.loader.batch_sampler = _SkipFirst(batch_sampler, self.iter_in_epoch)
        try:
            self._timer = time.perf_counter(), 0
            for batch in self.loader:
                self.run_step(batch)
                if self.iter >= self.max_iters or self._stopping():
                    ended = self.iter_in_epoch == self.iters_per_epoch
                    break
            else:  # the loader ran out: the epoch ended, though a batch the loader dropped
                ended = True  # (every item skipped, on_error="skip") took no step
                if self.iter_in_epoch < self.iters_per_epoch and dist.world_size() > 1:
                    raise RuntimeError(
                        f"Trainer: process {dist.rank()}'s loader dropped "
                        f"{self.iters_per_epoch - self.iter_in_epoch} batch(es) of epoch "
                        f"{self.epoch + 1} (every item skipped); data-parallel processes must "
                        "take the same steps: make the dataset raise on bad items")
        finally:
            self.loader.batch_sampler = batch_sampler
        if ended:
            self.epoch, self.iter_in_epoch = self.epoch + 1, 0
            self._call("after_epoch")

    def run_step(self, batch):
        logs = self.task.run_step(self, batch)                        # {name: float}
        self.iter, self.iter_in_epoch = self.iter + 1, self.iter_in_epoch + 1
        for scheduler in self.schedulers.values():
            scheduler.step()
        self.last_losses = dict(logs)
        self._log_step(_batch_size(batch) * dist.world_size())  # images of all processes
        self._call("after_step")

    def optimize(self, losses, name=None):
        """Back-propagate the sum of the "loss*" entries of `losses` ({name: scalar Tensor})
        and step optimizer `name` (the only one if None). Returns every entry as a float,
        the mean over the processes, and with name None the summed loss as "loss"."""
        optimizer = self._optimizer(name)
        loss = sum(value for key, value in losses.items() if key.startswith("loss"))
        optimizer.zero_grad()
        loss.backward()
        # one process: as they are; several: the mean gradient, losses and stop flag of all
        params = [p for group in optimizer.param_groups for p in group["params"]]
        names = list(losses)
        *means, value, stop = dist.average_gradients(
            params, [float(losses[n].item()) for n in names] + [loss.item(), self.stop_requested])
        self._stop_agreed = stop > 0  # a signal may reach one process only
        if not np.isfinite(value):  # stop before the step spoils the weights
            parts = ", ".join(f"{key}={float(v.item()):.4g}" for key, v in losses.items())
            raise FloatingPointError(
                f"Trainer: the loss is {value} at iteration {self.iter + 1} (epoch "
                f"{self.epoch + 1}; {parts}); the weights were left as the step before. Lower "
                f"the learning rate or add warmup; {self.out_dir}/checkpoints holds the last "
                "checkpoint to resume from")
        optimizer.step()
        logs = dict(zip(names, means))
        if name is None:
            logs["loss"] = value
        return logs

    def _optimizer(self, name):
        if name is None and len(self.optimizers) == 1:
            return next(iter(self.optimizers.values()))
        if name not in self.optimizers:
            raise KeyError(f"Trainer.optimize: no optimizer {name!r}; the task built "
                           f"{sorted(self.optimizers)}")
        return self.optimizers[name]

    # ------------------------------------------------------------ logging
    def _log_step(self, images):
        start, seen = self._timer
        seen += images
        self._timer = start, seen
        rate = seen / max(time.perf_counter() - start, 1e-9)
        lr = next(iter(self.optimizers.values())).param_groups[0]["lr"]
        shown = {k: f"{v:.4f}" for k, v in self.last_losses.items() if k.startswith("loss")}
        self._bar.set_postfix(epoch=self.epoch + 1, **shown, lr=f"{lr:.3g}",
                              img_s=f"{rate:.1f}", refresh=False)
        self._bar.update()
        if self.iter % self.log_every == 0 or self.iter == self.max_iters:
            self.log({"iter": self.iter, "epoch": self.epoch, "lr": lr,
                      "images_per_s": round(rate, 2), **self.last_losses})

    def log(self, record):
        """Append one JSON line to out_dir/log.jsonl (process 0)."""
        if not self.main:
            return
        record = {"time": round(time.time(), 3), **record}
        with open(os.path.join(self.out_dir, "log.jsonl"), "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def write(self, message):
        tqdm.write(message) if self.progress else None

    # ------------------------------------------------------------ state
    def state_dict(self):
        """Everything a resumed run needs (see CheckpointHook for what else is stored)."""
        state = {"model": self.model.state_dict(),
                 "optimizers": {k: v.state_dict() for k, v in self.optimizers.items()},
                 "schedulers": {k: v.state_dict() for k, v in self.schedulers.items()},
                 "iter": self.iter, "epoch": self.epoch, "iter_in_epoch": self.iter_in_epoch,
                 "data": {"seed": self._data_seed(), "epoch": self.epoch,
                          "batches_done": self.iter_in_epoch,
                          "iters_per_epoch": self.iters_per_epoch,
                          "processes": dist.world_size()},
                 "rng": capture_rng(), "config": self.config, "hooks": {}}
        for hook in self.hooks:
            if hasattr(hook, "state_dict"):
                state["hooks"][type(hook).__name__] = hook.state_dict()
        return state

    def load_state_dict(self, state):
        data = state.get("data", {})
        per_epoch = data.get("iters_per_epoch")  # absent from older checkpoints
        if (per_epoch is not None and int(per_epoch) != self.iters_per_epoch) or \
                int(state["iter_in_epoch"]) > self.iters_per_epoch:
            # the position in the epoch would mean another batch; past the epoch's end the
            # loop had found no batch to run and never finished the epoch (a hang)
            raise ValueError(
                f"Trainer.resume: the checkpoint was written with "
                f"{per_epoch if per_epoch is not None else 'another number of'} iterations "
                f"per epoch ({data.get('processes', 1)} process(es)), this run has "
                f"{self.iters_per_epoch} ({dist.world_size()}): resume with the same "
                "data.batch_size and number of processes, or start a new out_dir "
                "(finetune.weights= the checkpoint starts from its weights)")
        self.model.load_state_dict(state["model"])
        for kind, ours in (("optimizers", self.optimizers), ("schedulers", self.schedulers)):
            saved = _by_name(state, kind)
            if set(saved) != set(ours):
                raise ValueError(f"Trainer.resume: the checkpoint has {kind} {sorted(saved)}, "
                                 f"this run {sorted(ours)}")
            for name, value in saved.items():
                ours[name].load_state_dict(value)
        self.iter, self.epoch = int(state["iter"]), int(state["epoch"])
        self.iter_in_epoch = int(state["iter_in_epoch"])
        seed = state.get("data", {}).get("seed")
        if seed is not None and hasattr(self.loader, "seed") and self._data_seed() != seed:
            raise ValueError(f"Trainer.resume: the checkpoint's data seed is {seed}, the loader's "
                             f"is {self._data_seed()}; resume needs the same seed for the same "
                             "data order")
        for hook in self.hooks:
            saved = state.get("hooks", {}).get(type(hook).__name__)
            if saved is not None and hasattr(hook, "load_state_dict"):
                hook.load_state_dict(saved)
        restore_rng(state["rng"])

    def resume(self):
        """Load the newest checkpoint of out_dir/checkpoints, if any; returns its path."""
        path = find_latest(os.path.join(self.out_dir, "checkpoints"))
        if path is None:
            self.write(f"resume: no checkpoint in {self.out_dir}/checkpoints; starting afresh")
            return None
        self.load_state_dict(ty.load(path))
        self.write(f"resume: {path} (iteration {self.iter}, epoch {self.epoch})")
        self.log({"resumed_from": path, "iter": self.iter})
        return path

    def _stopping(self):
        """Whether to stop: asked by a signal; with several processes, asked by a signal to
        any of them before the last step's allreduce (so all stop after the same step)."""
        return self.stop_requested if dist.world_size() == 1 else self._stop_agreed

    def _data_seed(self):
        """The run's data seed (each process's loader augments with seed + its rank)."""
        return int(getattr(self.loader, "seed", 0) or 0) - dist.rank()

    def _call(self, event):
        for hook in self.hooks:
            method = getattr(hook, event, None)
            if method is not None and (self.main or getattr(hook, "every_process", False)):
                method()


def _by_name(state, kind):
    """{name: state} of a checkpoint's optimizers or schedulers; a checkpoint written
    before they were named holds one optimizer and one scheduler (as a hook's state)."""
    if kind in state:
        return dict(state[kind])
    if kind == "optimizers":
        return {"main": state["optimizer"]}
    saved = state.get("hooks", {}).get("LRSchedulerHook")
    return {} if saved is None else {"main": saved}


class _StopOnSignal:
    """SIGINT/SIGTERM ask the loop to stop after the current step (a checkpoint is then
    written by CheckpointHook.on_stop); a second Ctrl-C interrupts at once."""

    def __init__(self, trainer):
        self.trainer, self.saved = trainer, {}

    def _handler(self, signum, frame):
        if self.trainer.stop_requested and signum == signal.SIGINT:
            raise KeyboardInterrupt("a second Ctrl-C: stopped at once, without a checkpoint")
        self.trainer.stop_requested = True
        self.trainer.write(f"{signal.Signals(signum).name}: stopping after this step "
                           "(Ctrl-C again to abort at once)")

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.saved[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *exc):
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
        return False


def seed_everything(seed):
    """Seed the framework, numpy's and Python's global generators and the transforms' default."""
    ty.manual_seed(seed)
    np.random.seed(seed % 2 ** 32)
    random.seed(seed)
    transform_random.seed(seed)
