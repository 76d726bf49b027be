"""Learning-rate schedulers, each a closed form `lr_at(t)` of the step count `t`.

A "step" is whatever the caller makes it: call `scheduler.step()` once per epoch and
give milestones / T_max / total_iters in epochs, or once per iteration and give them
in iterations (detectron2-style recipes). The scheduler never looks at the clock.
Construction sets the LR for t = 0; each `step()` moves to t + 1 and writes
`lr_at(t)` into every parameter group's "lr". Because every LR is computed from `t`
and the base LRs alone (never from the previous LR), a scheduler restored with
`load_state_dict` gives exactly the LRs the uninterrupted one would have.

    # 5 epochs of linear warmup from 0.001 * lr, then step decay at 30 and 60:
    sched = WarmupWrapper(MultiStepLR(opt, [30, 60], 0.1), warmup_iters=5, warmup_factor=0.001)
    # PyTorch style: warmup, then cosine over the remaining 95 epochs:
    sched = SequentialLR(opt, [LinearLR(opt, 0.001, 1.0, 5), CosineAnnealingLR(opt, 95)], [5])
    for epoch in range(100):
        train_one_epoch(...); sched.step()

The counter is named `last_epoch` (as in PyTorch) whatever the unit; `base_lrs` are
the groups' "initial_lr" (set from "lr" by the first scheduler on an optimizer).
"""
import bisect
import copy
import math

from .optimizer import Optimizer


class LRScheduler:
    _not_saved = ("optimizer",)

    def __init__(self, optimizer, last_epoch=-1):
        name = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: expected an Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError(f"{name}: last_epoch={last_epoch} resumes a schedule, but param "
                               f"group {i} has no 'initial_lr'; load the optimizer state first")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, t):
        """The LR of every parameter group at step `t` (closed form)."""
        return [self._lr(base, t) for base in self.base_lrs]

    def _lr(self, base, t):
        raise NotImplementedError

    def step(self):
        self.last_epoch += 1
        self._apply(self.lr_at(self.last_epoch))

    def _apply(self, lrs):
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = list(lrs)

    def get_last_lr(self):
        """The LRs `step()` (or construction) last wrote, one per parameter group."""
        return list(self._last_lr)

    def state_dict(self):
        return {k: copy.deepcopy(v) for k, v in self.__dict__.items() if k not in self._not_saved}

    def load_state_dict(self, state_dict):
        """Restore the step count and settings, and write the matching LRs into the optimizer."""
        groups = len(self.optimizer.param_groups)
        if len(state_dict.get("base_lrs", ())) != groups:
            raise ValueError(f"{type(self).__name__}.load_state_dict: the state dict has "
                             f"{len(state_dict.get('base_lrs', ()))} base LRs, the optimizer has "
                             f"{groups} parameter groups")
        self.__dict__.update(copy.deepcopy(state_dict))
        self._apply(self.lr_at(self.last_epoch))


class LambdaLR(LRScheduler):
    """lr = base * lr_lambda(t); one function, or one per group. Functions are not saved."""
    _not_saved = ("optimizer", "lr_lambdas")

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        groups = len(optimizer.param_groups)
        lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * groups
        if len(lambdas) != groups:
            raise ValueError(f"LambdaLR: got {len(lambdas)} lr_lambdas for {groups} param groups")
        self.lr_lambdas = lambdas
        super().__init__(optimizer, last_epoch)

    def lr_at(self, t):
        return [base * fn(t) for base, fn in zip(self.base_lrs, self.lr_lambdas)]


class StepLR(LRScheduler):
    """lr = base * gamma ** (t // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def _lr(self, base, t):
        return base * self.gamma ** (t // self.step_size)


class MultiStepLR(LRScheduler):
    """lr = base * gamma ** (number of milestones <= t)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = sorted(int(m) for m in milestones), gamma
        super().__init__(optimizer, last_epoch)

    def _lr(self, base, t):
        return base * self.gamma ** bisect.bisect_right(self.milestones, t)


class ExponentialLR(LRScheduler):
    """lr = base * gamma ** t."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _lr(self, base, t):
        return base * self.gamma ** t


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base - eta_min) * (1 + cos(pi * t / T_max)) / 2 (SGDR without restarts).

    Past T_max the cosine continues (rises again), as in PyTorch; make T_max the run length.
    """

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be > 0, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _lr(self, base, t):
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * t / self.T_max)) / 2


class LinearLR(LRScheduler):
    """lr = base * factor, factor linear from start_factor (t=0) to end_factor (t>=total_iters).

    A linear warmup is LinearLR(opt, 0.001, 1.0, warmup_iters); a linear decay to zero
    is LinearLR(opt, 1.0, 0.0, total_iters).
    """

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        if total_iters <= 0:
            raise ValueError(f"LinearLR: total_iters must be > 0, got {total_iters}")
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def _lr(self, base, t):
        progress = min(t, self.total_iters) / self.total_iters
        return base * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class _Composite(LRScheduler):
    """Shared state-dict handling for schedulers built from other schedulers."""
    _not_saved = ("optimizer", "schedulers")

    def state_dict(self):
        state = super().state_dict()
        state["schedulers"] = [s.state_dict() for s in self.schedulers]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        children = state.pop("schedulers")
        if len(children) != len(self.schedulers):
            raise ValueError(f"{type(self).__name__}.load_state_dict: the state dict has "
                             f"{len(children)} inner schedulers, this one has "
                             f"{len(self.schedulers)}")
        for scheduler, child in zip(self.schedulers, children):
            scheduler.load_state_dict(child)
        super().load_state_dict(state)


class SequentialLR(_Composite):
    """Runs schedulers[i] from milestones[i-1] on, each with its own t counted from 0.

    The inner schedulers are only consulted (their `step()` is never called); build them
    on the same optimizer and hand them over.
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        if len(milestones) != len(schedulers) - 1 or list(milestones) != sorted(milestones):
            raise ValueError(f"SequentialLR: need len(schedulers) - 1 = {len(schedulers) - 1} "
                             f"increasing milestones, got {list(milestones)}")
        for i, scheduler in enumerate(schedulers):
            if scheduler.optimizer is not optimizer:
                raise ValueError(f"SequentialLR: scheduler {i} ({type(scheduler).__name__}) "
                                 "drives a different optimizer")
        self.schedulers, self.milestones = list(schedulers), [int(m) for m in milestones]
        super().__init__(optimizer, last_epoch)

    def lr_at(self, t):
        i = bisect.bisect_right(self.milestones, t)
        start = self.milestones[i - 1] if i > 0 else 0
        return self.schedulers[i].lr_at(t - start)


class WarmupWrapper(_Composite):
    """lr = scheduler.lr_at(t) * w(t); w rises from warmup_factor to 1 over warmup_iters.

    detectron2's warmup: the wrapped schedule runs from t = 0 underneath the warmup
    (method "linear": w = f + (1 - f) * t / warmup_iters; "constant": w = f).
    """

    def __init__(self, scheduler, warmup_iters, warmup_factor=0.001, method="linear"):
        if method not in ("linear", "constant"):
            raise ValueError("WarmupWrapper: method must be 'linear' or 'constant', "
                             f"got {method!r}")
        self.schedulers = [scheduler]
        self.warmup_iters, self.warmup_factor, self.method = warmup_iters, warmup_factor, method
        super().__init__(scheduler.optimizer, -1)

    def warmup(self, t):
        if t >= self.warmup_iters:
            return 1.0
        if self.method == "constant":
            return self.warmup_factor
        return self.warmup_factor + (1.0 - self.warmup_factor) * t / self.warmup_iters

    def lr_at(self, t):
        factor = self.warmup(t)
        return [lr * factor for lr in self.schedulers[0].lr_at(t)]
