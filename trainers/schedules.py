"""LR schedules of the published recipes, built per iteration from epoch-based settings.

Every builder is `(optimizer, epochs, iters_per_epoch, **recipe) -> LRScheduler` and is
stepped once per iteration, so a run resumed mid-epoch sees the same LRs. Configs
name them with `_target_` and `_partial_: true`; the trainer supplies the first three
(a run counted in iterations, trainer.max_epochs=null, passes max_iters / iters_per_epoch
epochs). Recipes counted in iterations (COCO's 90k schedule) give `unit: iter`: milestones
in iterations; warmup is `warmup_epochs` or `warmup_iters`, linear from warmup_factor.

    schedule:
      _target_: tianyuan.trainers.schedules.multistep
      _partial_: true
      milestones: [30, 60, 80]     # epochs (ResNet, He et al. 2016 / torchvision)

>>> sched = multistep(opt, epochs=90, iters_per_epoch=5005, milestones=[30, 60, 80])
>>> sched = multistep(opt, epochs=1, iters_per_epoch=90000, milestones=[60000, 80000],
...                   unit="iter", warmup_iters=1000)           # Faster R-CNN 1x (detectron2)
"""
from tianyuan.optim import lr_scheduler as lrs


UNITS = ("epoch", "iter")


def _iters(value, unit, iters_per_epoch):
    """`value` epochs (unit "epoch") or iterations (unit "iter") as whole iterations."""
    if unit not in UNITS:
        raise ValueError(f"schedule: unit must be one of {UNITS}, got {unit!r}")
    return int(round(value * (iters_per_epoch if unit == "epoch" else 1)))


def _total(epochs, iters_per_epoch):
    return max(1, int(round(epochs * iters_per_epoch)))


def _warmup(scheduler, warmup_epochs, iters_per_epoch, warmup_factor, warmup_iters=0):
    iters = int(round(warmup_epochs * iters_per_epoch)) + int(warmup_iters)
    if iters <= 0:
        return scheduler
    return lrs.WarmupWrapper(scheduler, iters, warmup_factor)


def multistep(optimizer, epochs, iters_per_epoch, milestones, gamma=0.1, warmup_epochs=0,
              warmup_factor=0.001, unit="epoch", warmup_iters=0):
    """LR x gamma at each milestone (ResNet: epochs 30/60/80 of 90, gamma 0.1; `unit: iter`,
    iterations: Faster R-CNN 1x 60k/80k of 90k)."""
    steps = [_iters(m, unit, iters_per_epoch) for m in milestones]
    return _warmup(lrs.MultiStepLR(optimizer, steps, gamma), warmup_epochs, iters_per_epoch,
                   warmup_factor, warmup_iters)


def cosine(optimizer, epochs, iters_per_epoch, eta_min=0.0, warmup_epochs=0,
           warmup_factor=0.001, warmup_iters=0):
    """Half a cosine from the base LR to eta_min over the run."""
    return _warmup(lrs.CosineAnnealingLR(optimizer, _total(epochs, iters_per_epoch), eta_min),
                   warmup_epochs, iters_per_epoch, warmup_factor, warmup_iters)


def linear(optimizer, epochs, iters_per_epoch, end_factor=0.0, warmup_epochs=0,
           warmup_factor=0.001, warmup_iters=0):
    """Linear decay from the base LR to end_factor x base, per iteration (ShuffleNet V1/V2:
    Zhang et al. 2018, Ma et al. 2018; lr 0.5 at batch 1024 decayed to 0)."""
    return _warmup(lrs.LinearLR(optimizer, 1.0, end_factor, _total(epochs, iters_per_epoch)),
                   warmup_epochs, iters_per_epoch, warmup_factor, warmup_iters)


def exponential(optimizer, epochs, iters_per_epoch, gamma=0.98, warmup_epochs=0,
                warmup_factor=0.001, warmup_iters=0):
    """LR x gamma once per epoch (MobileNetV2, Sandler et al. 2018: 0.98 per epoch)."""
    return _warmup(lrs.StepLR(optimizer, max(1, iters_per_epoch), gamma), warmup_epochs,
                   iters_per_epoch, warmup_factor, warmup_iters)


def constant(optimizer, epochs, iters_per_epoch, warmup_epochs=0, warmup_factor=0.001,
             warmup_iters=0):
    return _warmup(lrs.StepLR(optimizer, _total(epochs, iters_per_epoch) + 1, 1.0),
                   warmup_epochs, iters_per_epoch, warmup_factor, warmup_iters)
