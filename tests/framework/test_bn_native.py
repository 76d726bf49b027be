"""Native batch norm (framework/csrc/norm/batch_norm.cpp via tianyuan.ops.norm) against the
composed batch norm, forward, gradients and running statistics, on every ISA path."""
import numpy as np
import pytest

import tianyuan as ty
from helpers import each_isa, gradcheck
from tianyuan import _C
from tianyuan.functional.normalization import batch_norm, batch_norm_composed

SHAPES = [(4, 3), (2, 5, 7, 9), (3, 17, 1, 1), (1, 2, 33, 3)]


def run(fn, x, w, b, training, rm, rv):
    xt, wt, bt = (ty.tensor(a, requires_grad=True) for a in (x, w, b))
    y = fn(xt, rm, rv, wt, bt, training=training, momentum=0.3, eps=1e-3)
    gy = np.random.default_rng(5).standard_normal(y.shape).astype(x.dtype)
    (y * ty.tensor(gy)).sum().backward()
    return y.numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("training", [True, False])
def test_native_batch_norm_matches_composed(shape, training):
    rng = np.random.default_rng(0)
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    w, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    initial = (rng.standard_normal(c).astype(np.float32),
               rng.uniform(0.5, 2, c).astype(np.float32))
    want_stats = (initial[0].copy(), initial[1].copy())
    want = run(batch_norm_composed, x, w, b, training, *want_stats)
    for isa in each_isa():
        got_stats = (initial[0].copy(), initial[1].copy())
        got = run(batch_norm, x, w, b, training, *got_stats)
        for name, g, e in zip(("y", "gx", "gw", "gb"), got, want):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * max(1, np.abs(e).max()),
                                       err_msg=f"{name}, shape {shape}, {training=}, {isa}")
        np.testing.assert_allclose(got_stats[0], want_stats[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_stats[1], want_stats[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("training", [True, False])
def test_native_batch_norm_gradients_float64(training):
    rm, rv = np.array([0.1, -0.2, 0.3]), np.array([1.0, 2.0, 0.5])
    gradcheck(lambda x, w, b: batch_norm(x, rm.copy(), rv.copy(), w, b, training=training),
              [np.random.default_rng(1).standard_normal((2, 3, 3, 2)),
               np.array([1.0, -0.5, 2.0]), np.array([0.1, 0.2, 0.3])])


def test_batch_norm_without_affine_and_stats_kernel():
    x = np.random.default_rng(2).standard_normal((3, 4, 5, 5)).astype(np.float32)
    y = batch_norm(ty.tensor(x), None, None, training=True).numpy()
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    mean, var = _C.batch_norm_stats(x)
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, x.var(axis=(0, 2, 3)), rtol=1e-5)
    with pytest.raises(ValueError, match="batch_norm_affine: scale must be"):
        _C.batch_norm_affine(x, np.ones(3, np.float32), np.ones(4, np.float32))


def test_native_stats_keep_float32_accuracy_far_from_zero():
    # one pass, E[x^2] - E[x]^2 in double: a mean 10^4 standard deviations away from zero
    # still gives the variance to float32 accuracy, on every ISA path
    rng = np.random.default_rng(7)
    x = (1000.0 + 0.1 * rng.standard_normal((3, 4, 50, 60))).astype(np.float32)
    x64 = x.astype(np.float64)
    want_mean, want_var = x64.mean(axis=(0, 2, 3)), x64.var(axis=(0, 2, 3))
    for isa in each_isa():
        mean, var = _C.batch_norm_stats(x)
        np.testing.assert_allclose(mean, want_mean, rtol=1e-6, err_msg=isa)
        np.testing.assert_allclose(var, want_var, rtol=1e-5, err_msg=isa)
