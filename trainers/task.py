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
import numpy as np
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

    # ------------------------------------------------------------ tianyuan quantize
    def quant_data(self, cfg, pre):
        """(calibration loader, validation loader, meta) for `tianyuan quantize`: the data
        config's training split, unaugmented with the evaluation preprocessing `pre`, and
        its validation split."""
        from .commands import build_data
        return build_data(cfg, pre, splits=("train", "val"), augment="eval")

    def quant_keep_float(self, model):
        """Dotted names of submodules that stay float when `model` is quantized (besides
        quant.keep_float): a GAN's discriminator."""
        return []

    def quant_inputs(self, model, loader, count):
        """`count` inputs of `quant_forward`, for the QuantReport's timing and per-layer
        SQNR: the first images of `loader`."""
        images = []
        for batch in loader:
            images.append(np.asarray(batch["image"]))
            if sum(len(x) for x in images) >= count:
                break
        return np.concatenate(images)[:count]

    def quant_forward(self, model, x):
        """What the QuantReport times and compares layer by layer: model(x)."""
        return model(x)

    def quant_output_comparable(self, model):
        """Whether quant_forward's float and int8 outputs match element for element (the
        report's output SQNR)."""
        return True

    def report_metrics(self, metrics):
        """The evaluation's entries the QuantReport shows: its numbers, but the time."""
        return {k: v for k, v in metrics.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "seconds"}


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
