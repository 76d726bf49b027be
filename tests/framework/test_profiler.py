"""tianyuan.profiler: per-op forward / backward times of eager execution."""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import autograd, nn, profiler


def small_net():
    ty.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 4, 3, stride=2, padding=1), nn.Flatten(),
                         nn.Linear(4 * 4 * 4, 5))


def step(model, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss


def test_profile_counts_each_op_forward_and_backward():
    model = small_net().train()
    x = ty.tensor(np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32))
    y = ty.tensor(np.array([1, 3]))
    with profiler.profile() as prof:
        step(model, x, y)
    rows = {row["op"]: row for row in prof.rows()}
    assert rows["Conv2d"]["forward_calls"] == 2 and rows["Conv2d"]["backward_calls"] == 2
    assert rows["BatchNormTrain"]["forward_calls"] == 1
    # every parameter's gradient lands in a leaf: weight and bias of 2 convs, BN, linear
    assert rows["accumulate_grad"]["backward_calls"] == len(list(model.parameters()))
    assert all(row["forward_ms"] >= 0 and row["backward_ms"] >= 0 for row in rows.values())
    totals = [row["total_ms"] for row in prof.rows()]
    assert totals == sorted(totals, reverse=True)
    assert 0 < prof.ops_ms <= prof.wall_ms and prof.outside_ms >= 0


def test_profile_leaves_the_gradients_alone_and_restores_dispatch():
    x = ty.tensor(np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32))
    y = ty.tensor(np.array([0, 4]))
    grads = []
    for profiled in (False, True):
        model = small_net().train()
        if profiled:
            with profiler.profile():
                step(model, x, y)
        else:
            step(model, x, y)
        grads.append([p.grad.numpy() for p in model.parameters()])
    for plain, timed in zip(*grads):
        np.testing.assert_array_equal(plain, timed)
    apply = autograd.Function.__dict__["apply"]
    propagate, accumulate = autograd._propagate, autograd._accumulate
    with pytest.raises(ValueError, match="inside"):
        with profiler.profile():
            raise ValueError("inside")
    assert autograd.Function.__dict__["apply"] is apply
    assert (autograd._propagate, autograd._accumulate) == (propagate, accumulate)


def test_nested_ops_count_their_own_time_once():
    class Outer(autograd.Function):
        def forward(self, a):
            # an op whose forward runs another op: the inner one's time is its own
            return (ty.tensor(a) * 2).data

        def backward(self, g):
            return g * 2

    with profiler.profile() as prof:
        Outer.apply(ty.ones(4, requires_grad=True)).sum().backward()
    rows = {row["op"]: row for row in prof.rows()}
    assert rows["Outer"]["forward_calls"] == 1 and rows["Mul"]["forward_calls"] == 1
    assert abs(prof.ops_ms - sum(row["total_ms"] for row in rows.values())) < 0.01


def test_profiles_do_not_nest():
    with profiler.profile():
        with pytest.raises(RuntimeError, match="already open"):
            with profiler.profile():
                pass
