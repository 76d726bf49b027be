"""Periodic evaluation, the loop's hook besides checkpointing (checkpoint.py).

A hook is an object with any of `before_train`, `after_step`, `after_epoch`, `after_train`,
`on_stop` (and `state_dict`/`load_state_dict` if it has state a resumed run needs); the
Trainer sets `hook.trainer` and calls them in list order.
"""
import math
import os

import tianyuan as ty
from tianyuan.evaluation import inference


class EvalHook:
    """Runs `evaluator` (evaluation.Evaluator) over `loader` every `every` epochs (or, given
    `every_iters`, every that many iterations instead: runs counted in iterations, a GAN's
    FID) and at the end, logs its metrics, and keeps the best `metric` (mode "max" or
    "min") in out_dir/best.safetensors. Data-parallel, every process scores its share of
    the loader and gets the merged result (evaluation.inference); process 0 writes."""
    every_process = True

    def __init__(self, evaluator, loader, metric, every=1, mode="max", every_iters=None):
        if mode not in ("max", "min"):
            raise ValueError(f"EvalHook: mode must be 'max' or 'min', got {mode!r}")
        self.evaluator, self.loader, self.every = evaluator, loader, every
        self.every_iters = int(every_iters or 0)
        self.metric, self.mode = metric, mode
        self.best, self.best_iter, self.last_iter, self.trainer = None, None, None, None

    def run(self):
        trainer = self.trainer
        ty.distributed.broadcast_state(trainer.model, parameters=False)  # process 0's BN stats
        metrics = self.evaluate(trainer.model)
        trainer.model.train()
        trainer.metrics, self.last_iter = dict(metrics), trainer.iter
        trainer.log({"iter": trainer.iter, "epoch": trainer.epoch, "eval": metrics})
        shown = "  ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in metrics.items() if not isinstance(v, (dict, list)))
        trainer.write(f"eval @ iter {trainer.iter} (epoch {trainer.epoch}): {shown}")
        self._track_best(metrics.get(self.metric))

    def evaluate(self, model):
        """The evaluator's metrics of `model` over the loader (no timing)."""
        metrics = inference(model, self.loader, self.evaluator, progress=False)
        metrics.pop("seconds", None)
        return metrics

    def _track_best(self, value):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        better = self.best is None or (value > self.best if self.mode == "max" else
                                       value < self.best)
        if better:
            self.best, self.best_iter = float(value), self.trainer.iter
            if self.trainer.main:
                ty.save({"model": self.trainer.model.state_dict(), self.metric: self.best,
                         "iter": self.trainer.iter},
                        os.path.join(self.trainer.out_dir, "best.safetensors"))

    def after_step(self):
        if self.every_iters and self.trainer.iter % self.every_iters == 0:
            self.run()

    def after_epoch(self):
        if not self.every_iters and self.every and self.trainer.epoch % self.every == 0:
            self.run()

    def after_train(self):
        if self.last_iter != self.trainer.iter:
            self.run()

    def state_dict(self):
        return {"best": self.best, "best_iter": self.best_iter, "last_iter": self.last_iter}

    def load_state_dict(self, state):
        self.best, self.best_iter = state["best"], state["best_iter"]
        self.last_iter = state["last_iter"]
