"""LR schedules of the published recipes, built per iteration from epoch-based settings.

Every builder is `(optimizer, epochs, iters_per_epoch, **recipe) -> LRScheduler` and is
stepped once per iteration, so a run resumed mid-epoch sees the same LRs. Configs
name them with `_target_` and `_partial_: true`; the trainer supplies the first three:

    schedule:
      _target_: tianyuan.trainers.schedules.multistep
      _partial_: true
      milestones: [30, 60, 80]     # epochs (ResNet, He et al. 2016 / torchvision)

>>> sched = multistep(opt, epochs=90, iters_per_epoch=5005, milestones=[30, 60, 80])
"""
from tianyuan.optim import lr_scheduler as lrs


def _warmup(scheduler, warmup_epochs, iters_per_epoch, warmup_factor):
    iters = int(round(warmup_epochs * iters_per_epoch))
    if iters <= 0:
        return scheduler
    return lrs.WarmupWrapper(scheduler, iters, warmup_factor)


def multistep(optimizer, epochs, iters_per_epoch, milestones, gamma=0.1, warmup_epochs=0,
              warmup_factor=0.001):
    """LR x gamma at each milestone epoch (ResNet: 30/60/80 of 90, gamma 0.1)."""
    steps = [int(round(m * iters_per_epoch)) for m in milestones]
    return _warmup(lrs.MultiStepLR(optimizer, steps, gamma), warmup_epochs, iters_per_epoch,
                   warmup_factor)


def cosine(optimizer, epochs, iters_per_epoch, eta_min=0.0, warmup_epochs=0,
           warmup_factor=0.001):
    """Half a cosine from the base LR to eta_min over the run."""
    total = max(1, epochs * iters_per_epoch)
    return _warmup(lrs.CosineAnnealingLR(optimizer, total, eta_min), warmup_epochs,
                   iters_per_epoch, warmup_factor)


def linear(optimizer, epochs, iters_per_epoch, end_factor=0.0, warmup_epochs=0,
           warmup_factor=0.001):
    """Linear decay from the base LR to end_factor x base, per iteration (ShuffleNet V1/V2:
    Zhang et al. 2018, Ma et al. 2018; lr 0.5 at batch 1024 decayed to 0)."""
    total = max(1, epochs * iters_per_epoch)
    return _warmup(lrs.LinearLR(optimizer, 1.0, end_factor, total), warmup_epochs,
                   iters_per_epoch, warmup_factor)


def exponential(optimizer, epochs, iters_per_epoch, gamma=0.98, warmup_epochs=0,
                warmup_factor=0.001):
    """LR x gamma once per epoch (MobileNetV2, Sandler et al. 2018: 0.98 per epoch)."""
    return _warmup(lrs.StepLR(optimizer, max(1, iters_per_epoch), gamma), warmup_epochs,
                   iters_per_epoch, warmup_factor)


def constant(optimizer, epochs, iters_per_epoch, warmup_epochs=0, warmup_factor=0.001):
    return _warmup(lrs.StepLR(optimizer, max(1, epochs * iters_per_epoch) + 1, 1.0),
                   warmup_epochs, iters_per_epoch, warmup_factor)
