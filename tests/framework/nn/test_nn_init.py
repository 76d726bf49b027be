import math

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn
from tianyuan.nn import init


def test_fan_in_and_fan_out():
    assert init.calculate_fan_in_and_fan_out(ty.zeros(64, 32, 3, 3)) == (288, 576)
    assert init.calculate_fan_in_and_fan_out(ty.zeros(10, 20)) == (20, 10)
    with pytest.raises(ValueError, match=r"at least 2 dims.*\(5,\)"):
        init.calculate_fan_in_and_fan_out(ty.zeros(5))


@pytest.mark.parametrize("fn,mode,fan,gain", [
    (init.kaiming_normal_, "fan_in", 32 * 9, math.sqrt(2)),
    (init.kaiming_normal_, "fan_out", 64 * 9, math.sqrt(2)),
    (init.kaiming_uniform_, "fan_in", 32 * 9, math.sqrt(2)),
])
def test_kaiming_std(fn, mode, fan, gain):
    ty.manual_seed(0)
    w = fn(ty.zeros(64, 32, 3, 3), mode=mode, nonlinearity="relu")
    expected = gain / math.sqrt(fan)
    assert abs(w.numpy().std() / expected - 1) < 0.1
    assert abs(w.numpy().mean()) < 0.1 * expected
    assert w.dtype == np.float32


def test_kaiming_leaky_relu_gain_and_uniform_bound():
    ty.manual_seed(1)
    w = init.kaiming_uniform_(ty.zeros(100, 50), a=math.sqrt(5))
    bound = math.sqrt(3) * math.sqrt(2 / 6) / math.sqrt(50)    # = 1 / sqrt(fan_in)
    assert np.abs(w.numpy()).max() <= bound
    assert np.abs(w.numpy()).max() > 0.95 * bound


def test_xavier():
    ty.manual_seed(2)
    w = init.xavier_uniform_(ty.zeros(60, 40), gain=2.0)
    bound = 2.0 * math.sqrt(6 / 100)
    assert np.abs(w.numpy()).max() <= bound
    assert abs(w.numpy().std() / (bound / math.sqrt(3)) - 1) < 0.1
    w = init.xavier_normal_(ty.zeros(60, 40))
    assert abs(w.numpy().std() / math.sqrt(2 / 100) - 1) < 0.1


def test_simple_fills_and_seeding():
    t = ty.zeros(3, 4)
    assert (init.ones_(t).numpy() == 1).all()
    assert (init.zeros_(t).numpy() == 0).all()
    assert (init.constant_(t, 0.5).numpy() == 0.5).all()
    u = init.uniform_(ty.zeros(1000), -1, 3).numpy()
    assert u.min() >= -1 and u.max() < 3 and abs(u.mean() - 1) < 0.15
    n = init.normal_(ty.zeros(2000), 5, 2).numpy()
    assert abs(n.mean() - 5) < 0.2 and abs(n.std() - 2) < 0.2
    tn = init.trunc_normal_(ty.zeros(2000), std=1.0, a=-1.0, b=1.0).numpy()
    assert tn.min() >= -1 and tn.max() <= 1
    ty.manual_seed(7)
    a = init.normal_(ty.zeros(5)).numpy().copy()
    ty.manual_seed(7)
    np.testing.assert_array_equal(a, init.normal_(ty.zeros(5)).numpy())
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_normal_(ty.zeros(2, 2), mode="fan_avg")


@pytest.mark.parametrize("make,fan_in", [
    (lambda: nn.Linear(50, 30), 50),
    (lambda: nn.Conv2d(8, 16, 3), 8 * 9),
    (lambda: nn.Conv2d(8, 16, 3, groups=4), 2 * 9),
    (lambda: nn.ConvTranspose2d(8, 16, 3, groups=2), 8 * 9),   # fan_in from weight dim 1
])
def test_default_init_bounds_match_pytorch(make, fan_in):
    ty.manual_seed(3)
    m = make()
    bound = 1 / math.sqrt(fan_in)
    for p in (m.weight, m.bias):
        assert np.abs(p.numpy()).max() <= bound
        assert np.abs(p.numpy()).max() > 0.8 * bound
