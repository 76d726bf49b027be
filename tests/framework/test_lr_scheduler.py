"""LR schedulers: sequences against closed forms, composition with warmup, exact resume."""
import math

import numpy as np
import pytest

import tianyuan as ty
from tianyuan.optim import SGD
from tianyuan.optim.lr_scheduler import (CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR,
                                         MultiStepLR, SequentialLR, StepLR, WarmupWrapper)

BASE = (0.1, 0.02)  # two parameter groups with different LRs


def make_opt():
    groups = [{"params": [ty.ones(1, requires_grad=True)], "lr": lr} for lr in BASE]
    return SGD(groups, lr=1.0, momentum=0.9)


def sequence(scheduler, steps):
    """[get_last_lr()] at t = 0, 1, ..., steps - 1; checks the optimizer sees the same LRs."""
    lrs = []
    for t in range(steps):
        if t:
            scheduler.step()
        lrs.append(scheduler.get_last_lr())
        assert [g["lr"] for g in scheduler.optimizer.param_groups] == lrs[-1]
    return lrs


def cosine(base, t, T, eta_min=0.0):
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * t / T)) / 2


def warmup_multistep(opt):
    return WarmupWrapper(MultiStepLR(opt, [6, 9], gamma=0.1), warmup_iters=4, warmup_factor=0.01)


def warmup_cosine(opt):
    warmup = LinearLR(opt, start_factor=0.001, end_factor=1.0, total_iters=3)
    return SequentialLR(opt, [warmup, CosineAnnealingLR(opt, T_max=8, eta_min=1e-4)], [3])


def linear_factor(f, t, w):
    return f + (1 - f) * t / w if t < w else 1.0


# (builder, closed form lr(base, t)), each checked over 14 steps
SCHEDULES = {
    "lambda": (lambda o: LambdaLR(o, lambda t: 1.0 / (t + 1)), lambda b, t: b / (t + 1)),
    "step": (lambda o: StepLR(o, step_size=3, gamma=0.5), lambda b, t: b * 0.5 ** (t // 3)),
    "multistep": (lambda o: MultiStepLR(o, [4, 7, 7], gamma=0.1),
                  lambda b, t: b * 0.1 ** ((t >= 4) + 2 * (t >= 7))),
    "exponential": (lambda o: ExponentialLR(o, gamma=0.9), lambda b, t: b * 0.9 ** t),
    "cosine": (lambda o: CosineAnnealingLR(o, T_max=10, eta_min=1e-3),
               lambda b, t: cosine(b, t, 10, 1e-3)),
    "linear_decay": (lambda o: LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=10),
                     lambda b, t: b * max(0.0, 1 - t / 10)),
    "linear_warmup": (lambda o: LinearLR(o, start_factor=0.25, total_iters=4),
                      lambda b, t: b * linear_factor(0.25, t, 4)),
    "warmup_multistep": (warmup_multistep,
                         lambda b, t: b * linear_factor(0.01, t, 4) * 0.1 ** ((t >= 6) + (t >= 9))),
    "warmup_cosine": (warmup_cosine,
                      lambda b, t: (b * linear_factor(0.001, t, 3) if t < 3
                                    else cosine(b, t - 3, 8, 1e-4))),
    "warmup_constant": (lambda o: WarmupWrapper(CosineAnnealingLR(o, 12), 2, 0.1, "constant"),
                        lambda b, t: cosine(b, t, 12) * (0.1 if t < 2 else 1.0)),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_sequence_matches_closed_form(name):
    build, closed_form = SCHEDULES[name]
    got = sequence(build(make_opt()), 14)
    expected = [[closed_form(b, t) for b in BASE] for t in range(14)]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", SCHEDULES)
def test_resume_from_state_dict_gives_identical_lrs(name, tmp_path):
    build = SCHEDULES[name][0]
    full = sequence(build(make_opt()), 14)
    first = build(make_opt())
    head = sequence(first, 6)
    ty.save({"scheduler": first.state_dict()}, tmp_path / "s.safetensors")
    resumed = build(make_opt())  # a fresh optimizer: its LRs come from the scheduler state
    resumed.load_state_dict(ty.load(tmp_path / "s.safetensors")["scheduler"])
    assert resumed.get_last_lr() == head[-1]
    assert [g["lr"] for g in resumed.optimizer.param_groups] == head[-1]
    tail = [resumed.get_last_lr()] + [(resumed.step(), resumed.get_last_lr())[1] for _ in range(8)]
    assert head[:-1] + tail == full


def test_per_group_lambdas_and_initial_lr():
    opt = make_opt()
    sched = LambdaLR(opt, [lambda t: 1.0, lambda t: 0.5 ** t])
    sched.step()
    assert sched.get_last_lr() == [0.1, 0.01]
    assert [g["initial_lr"] for g in opt.param_groups] == list(BASE)
    assert "lr_lambdas" not in sched.state_dict()


def test_scheduler_drives_the_update():
    p = ty.zeros(1, requires_grad=True)
    opt = SGD([p], lr=1.0)
    sched = MultiStepLR(opt, [1], gamma=0.1)
    for _ in range(2):
        p.grad = ty.ones(1)
        opt.step()
        sched.step()
    np.testing.assert_allclose(p.data, [-1.1])


def test_errors():
    opt = make_opt()
    with pytest.raises(ValueError, match="milestones"):
        SequentialLR(opt, [StepLR(opt, 2), StepLR(opt, 3)], [])
    with pytest.raises(ValueError, match="different optimizer"):
        SequentialLR(opt, [StepLR(opt, 2), StepLR(make_opt(), 3)], [4])
    with pytest.raises(KeyError, match="initial_lr"):
        StepLR(make_opt(), 2, last_epoch=5)
    with pytest.raises(ValueError, match="2 base LRs.*1 parameter groups"):
        StepLR(SGD([ty.ones(1, requires_grad=True)], lr=0.1), 2).load_state_dict(
            StepLR(opt, 2).state_dict())
    with pytest.raises(ValueError, match="T_max"):
        CosineAnnealingLR(opt, 0)


# ---------------------------------------------------------------- parity with PyTorch (optional)

def torch_schedules(torch, opt):
    S = torch.optim.lr_scheduler
    return {
        "lambda": lambda: S.LambdaLR(opt, lambda t: 1.0 / (t + 1)),
        "step": lambda: S.StepLR(opt, step_size=3, gamma=0.5),
        "multistep": lambda: S.MultiStepLR(opt, [4, 7, 7], gamma=0.1),
        "exponential": lambda: S.ExponentialLR(opt, gamma=0.9),
        "cosine": lambda: S.CosineAnnealingLR(opt, T_max=10, eta_min=1e-3),
        "linear_decay": lambda: S.LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=10),
        "linear_warmup": lambda: S.LinearLR(opt, start_factor=0.25, total_iters=4),
        "warmup_cosine": lambda: S.SequentialLR(opt, [
            S.LinearLR(opt, start_factor=0.001, end_factor=1.0, total_iters=3),
            S.CosineAnnealingLR(opt, T_max=8, eta_min=1e-4)], milestones=[3]),
    }


@pytest.mark.parametrize("name", ["lambda", "step", "multistep", "exponential", "cosine",
                                  "linear_decay", "linear_warmup", "warmup_cosine"])
def test_parity_with_torch(name):
    torch = pytest.importorskip("torch")
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in BASE]
    opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, BASE)], lr=1.0)
    theirs = torch_schedules(torch, opt)[name]()
    expected = []
    for t in range(14):
        if t:
            opt.step()
            theirs.step()
        expected.append(theirs.get_last_lr())
    np.testing.assert_allclose(sequence(SCHEDULES[name][0](make_opt()), 14), expected,
                               rtol=1e-9, atol=1e-12)
