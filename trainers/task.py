"""A task: what one kind of model (classification, detection, keypoints, generation) asks
of the shared Trainer. The task builds its data, model, optimizers and evaluator from the
composed config and takes one training step; the Trainer (engine.py) owns the loop, the
hooks, checkpoints and exact resume (detectron2's SimpleTrainer and its task object).

`cfg.task` names the task's class with `_target_` (trainers/conf/task/*.yaml) and gives
its own settings as constructor arguments; the methods below read the rest of the config
(data, model, optim, schedule), each the part every task shares.

>>> task = instantiate(cfg.task)                  # ClassificationTask(label_smoothing=0.1)
>>> train_loader, val_loader, meta = task.build_data(cfg)
"""
from hydra.utils import instantiate


class Task:
    """The defaults: data from `cfg.data` (a builder returning (train loader, val loader
    or None, meta)), the model from `cfg.model`, one optimizer ("main") from `cfg.optim`
    over the trainable parameters, one LR schedule per optimizer from `cfg.schedule`, and
    the loss-dict step of `forward`. `metric`/`mode`: what the best checkpoint tracks."""

    name = "task"
    metric, mode = None, "max"

    def build_data(self, cfg):
        return instantiate(cfg.data, seed=cfg.seed)

    def build_model(self, cfg, meta):
        return instantiate(cfg.model)

    def optimizers(self, cfg, model):
        params = [p for p in model.parameters() if p.requires_grad]
        return {"main": instantiate(cfg.optim)(params)}

    def schedulers(self, cfg, optimizers, epochs, iters_per_epoch):
        build = instantiate(cfg.schedule)
        return {name: build(optimizer, epochs=epochs, iters_per_epoch=iters_per_epoch)
                for name, optimizer in optimizers.items()}

    def evaluator(self, cfg, meta):
        """An evaluation.Evaluator for the validation loader, or None (no evaluation)."""
        return None

    def hooks(self, cfg):
        """The task's own hooks, after the checkpoint hook (a GAN's sample grids)."""
        return []

    def forward(self, model, batch):
        """{name: scalar Tensor}: "loss*" entries are summed and back-propagated."""
        raise NotImplementedError(f"{type(self).__name__}: give forward or run_step")

    def run_step(self, trainer, batch):
        """One training iteration; returns the values to log ({name: float})."""
        return trainer.optimize(self.forward(trainer.model, batch))

    def results(self, trainer):
        """Task-specific entries of the run's results.json."""
        return {}


class LossTask(Task):
    """The loss-dict step of a function `forward(model, batch) -> {name: scalar Tensor}`: the
    shared loop over a model and loader of one's own.

    >>> Trainer(LossTask(forward), model, optimizer, loader, max_epochs=1, out_dir="runs/x")
    """

    name = "loss"

    def __init__(self, forward):
        self._forward = forward

    def forward(self, model, batch):
        return self._forward(model, batch)
