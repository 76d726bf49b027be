import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from helpers import check_op, each_isa

S = (3, 5)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("fn,ref,low,high", [
    (F.relu, lambda x: np.maximum(x, 0), -2, 2),
    (F.relu6, lambda x: np.clip(x, 0, 6), -2, 8),
    (lambda x: F.leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x), -2, 2),
    (F.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x), -2, 2),
    (F.sigmoid, _sigmoid, -4, 4),
    (F.tanh, np.tanh, -3, 3),
    (F.hsigmoid, lambda x: np.clip(x + 3, 0, 6) / 6, -5, 5),
    (F.hswish, lambda x: x * np.clip(x + 3, 0, 6) / 6, -5, 5),
    (F.softplus, lambda x: np.log1p(np.exp(x)), -4, 4),
    (lambda x: F.softplus(x, beta=2.0, threshold=3.0),
     lambda x: np.where(2 * x > 3, x, np.log1p(np.exp(2 * x)) / 2), -3, 3),
])
def test_activation(fn, ref, low, high):
    check_op(fn, ref, [S], low=low, high=high)


def test_softplus_extremes_are_finite_and_exact():
    x = ty.tensor([-200.0, -30.0, 0.0, 30.0, 200.0], requires_grad=True)
    y = F.softplus(x)
    np.testing.assert_allclose(y.numpy(), np.log1p(np.exp(np.float64([-200, -30, 0, 30, 200]))),
                               rtol=1e-6, atol=1e-30)
    assert y.numpy()[1] > 0  # log1p precision, not 0
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0, _sigmoid(-30.0), 0.5, 1, 1], atol=1e-7)


def test_sigmoid_and_tanh_saturate_without_nan():
    x = ty.tensor([-1000.0, 1000.0], requires_grad=True)
    F.sigmoid(x).sum().backward()
    assert np.isfinite(x.grad.numpy()).all()
    np.testing.assert_allclose(F.sigmoid(x).numpy(), [0, 1])


@pytest.mark.parametrize("shape,axis", [((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1)])
def test_softmax(shape, axis):
    check_op(lambda x: F.softmax(x, axis), lambda x: _softmax(x, axis), [shape])


@pytest.mark.parametrize("shape,axis", [((3, 5), -1), ((2, 3, 4), 1)])
def test_log_softmax(shape, axis):
    check_op(lambda x: F.log_softmax(x, axis), lambda x: np.log(_softmax(x, axis)), [shape])


def test_softmax_is_stable_for_large_logits():
    x = ty.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]])
    assert np.isfinite(F.log_softmax(x).numpy()).all()
    np.testing.assert_allclose(F.softmax(x).numpy()[0], _softmax(np.float64([0, 1, 2]), 0),
                               rtol=1e-6)


def test_softmax_axis_error():
    with pytest.raises(ValueError, match=r"softmax: axis 2 .*\(3, 5\)"):
        F.softmax(ty.randn(3, 5), axis=2)


def test_activation_rejects_integer_input():
    with pytest.raises(TypeError, match="relu"):
        F.relu(ty.tensor([1, 2]))


def test_dropout_statistics_scaling_and_gradient():
    ty.manual_seed(0)
    x = ty.ones(200, 100, requires_grad=True)
    y = F.dropout(x, 0.3)
    kept = y.numpy() != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(y.numpy()[kept], 1 / 0.7, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.numpy())


def test_dropout_seeded_eval_and_edges():
    x = ty.randn(4, 6)
    ty.manual_seed(3)
    a = F.dropout(x, 0.5).numpy()
    ty.manual_seed(3)
    np.testing.assert_array_equal(a, F.dropout(x, 0.5).numpy())
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    assert not F.dropout(x, 1.0).numpy().any()
    with pytest.raises(ValueError, match="dropout"):
        F.dropout(x, 1.5)


@pytest.mark.parametrize("n,lo,hi", [(1, 0.0, np.inf), (17, 0.0, 6.0), ((1 << 16) + 33, 0.0, 6.0),
                                     (70001, -1.5, 2.0)])
def test_native_clamp_matches_its_twin_on_every_isa(n, lo, hi):
    # sizes past one OpenMP block and the threshold for threads, the bounds themselves, NaN
    from tianyuan.ops.elementwise import clamp_grad_ref, clamp_ref
    rng = np.random.default_rng(n)
    x = rng.uniform(-3, 8, n).astype(np.float32)
    x[: min(n, 4)] = [lo, hi if np.isfinite(hi) else 1e30, np.nan, -np.inf][: min(n, 4)]
    g = rng.standard_normal(n).astype(np.float32)
    want_y = clamp_ref(x, lo, hi)
    want_g = clamp_grad_ref(g, want_y, lo, hi)
    for isa in each_isa():
        y = ty._C.clamp(x, lo, hi)
        np.testing.assert_array_equal(y, want_y, err_msg=f"forward, {isa}")
        np.testing.assert_array_equal(ty._C.clamp_backward(g, y, lo, hi), want_g,
                                      err_msg=f"backward, {isa}")


def test_relu_and_relu6_gradients_come_from_the_output():
    x = ty.tensor(np.float32([-1.0, 0.0, 0.5, 6.0, 7.0, np.nan]), requires_grad=True)
    (F.relu(x) + F.relu6(x)).sum().backward()
    np.testing.assert_array_equal(F.relu(x).numpy(), [0, 0, 0.5, 6, 7, np.nan])
    # the bounds themselves get no gradient (PyTorch's convention), NaN none
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 2, 1, 1, 0])
    x64 = ty.tensor(np.float64([-1.0, 3.0]), requires_grad=True)
    F.relu6(x64).sum().backward()  # the numpy twin for other dtypes
    np.testing.assert_array_equal(x64.grad.numpy(), [0, 1])


def test_native_clamp_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"float32, got float64 of shape \(3\)"):
        ty._C.clamp(np.zeros(3), 0.0, 1.0)
    with pytest.raises(ValueError, match="lo <= hi"):
        ty._C.clamp(np.zeros(3, np.float32), 1.0, 0.0)
    with pytest.raises(ValueError, match=r"same shape, got \(3\) and \(4\)"):
        ty._C.clamp_backward(np.zeros(3, np.float32), np.zeros(4, np.float32), 0.0, 1.0)


def test_add_relu_module_is_add_then_relu_bit_for_bit_on_every_isa():
    # nn.AddReLU on float32 of one shape runs AddClamp (one native pass): output and both
    # gradients equal relu(a + b)'s, NaN passing through; other shapes take the two ops
    from tianyuan import nn
    rng = np.random.default_rng(9)
    a = rng.standard_normal((2, 3, 70, 90)).astype(np.float32)  # 37800 values: parallel
    b = rng.standard_normal(a.shape).astype(np.float32)
    a.flat[7] = np.nan
    g = rng.standard_normal(a.shape).astype(np.float32)
    for isa in each_isa():
        outs = []
        for fused in (True, False):
            ta, tb = ty.tensor(a, requires_grad=True), ty.tensor(b, requires_grad=True)
            y = nn.AddReLU()(ta, tb) if fused else F.relu(ta + tb)
            assert (y._ctx.name == "AddClamp") == fused
            y.backward(g)
            outs.append((y.numpy(), ta.grad.numpy(), tb.grad.numpy()))
        for got, want in zip(*outs):
            np.testing.assert_array_equal(got, want, err_msg=isa)
    broadcast = nn.AddReLU()(ty.tensor(a), ty.tensor(b[:1]))
    np.testing.assert_array_equal(broadcast.numpy(), np.maximum(a + b[:1], 0))
