import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from helpers import check_op
from tianyuan import _C, nn


def _axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _bcast(v, x):
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def bn_train_ref(x, w, b, eps=1e-5):
    mean = x.mean(_axes(x), keepdims=True)
    var = x.var(_axes(x), keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * _bcast(w, x) + _bcast(b, x)


def bn_eval_ref(x, rm, rv, w, b, eps=1e-5):
    return (x - _bcast(rm, x)) / np.sqrt(_bcast(rv, x) + eps) * _bcast(w, x) + _bcast(b, x)


@pytest.mark.parametrize("shape", [(6, 3), (3, 2, 3, 3)])
def test_batch_norm_train_gradient_through_batch_stats(shape):
    c = shape[1]
    check_op(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
             bn_train_ref, [shape, (c,), (c,)], fwd_rtol=1e-4, fwd_atol=1e-5)


@pytest.mark.parametrize("shape", [(6, 3), (3, 2, 3, 3)])
@pytest.mark.parametrize("offset", [3.0, -3.0])
def test_batch_norm_train_input_scale(shape, offset):
    # x * s normalised without forming it; s of either sign, a large eps (the gradient to s
    # runs through it)
    c = shape[1]
    check_op(lambda x, w, b, s: F.batch_norm(x, None, None, w, b, training=True, eps=0.5,
                                             input_scale=s + offset),
             lambda x, w, b, s: bn_train_ref(x * _bcast(s + offset, x), w, b, eps=0.5),
             [shape, (c,), (c,), (c,)], fwd_rtol=1e-4, fwd_atol=1e-5)


def test_batch_norm_input_scale_running_stats_and_eval():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32) * 3 + 1
    s = np.array([0.5, -2.0, 1.5], np.float32)
    stats = [(np.zeros(3, np.float32), np.ones(3, np.float32)) for _ in range(2)]
    F.batch_norm(ty.tensor(x), *stats[0], training=True, input_scale=ty.tensor(s))
    F.batch_norm(ty.tensor(x * s[None, :, None, None]), *stats[1], training=True)
    for a, b in zip(*stats):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    out = F.batch_norm(ty.tensor(x), *stats[0], input_scale=ty.tensor(s))
    np.testing.assert_allclose(out.numpy(), bn_eval_ref(x * s[None, :, None, None], *stats[1],
                                                        np.ones(3), np.zeros(3)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(6, 3), (3, 2, 3, 3)])
def test_batch_norm_train_without_affine(shape):
    c = shape[1]
    check_op(lambda x: F.batch_norm(x, None, None, training=True),
             lambda x: bn_train_ref(x, np.ones(c), np.zeros(c)), [shape], fwd_rtol=1e-4,
             fwd_atol=1e-5)


@pytest.mark.parametrize("shape", [(6, 3), (3, 2, 3, 3)])
def test_batch_norm_eval_uses_running_stats(shape):
    c = shape[1]
    rm, rv = np.linspace(-1, 1, c), np.linspace(0.5, 2, c)
    check_op(lambda x, w, b: F.batch_norm(x, ty.tensor(rm), ty.tensor(rv), w, b),
             lambda x, w, b: bn_eval_ref(x, rm, rv, w, b), [shape, (c,), (c,)])


def test_running_stats_update_vs_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 3.0, (4, 3, 5, 5)).astype(np.float32)
    rm, rv = ty.zeros(3), ty.ones(3)
    before_rm = rm.data
    F.batch_norm(ty.tensor(x), rm, rv, training=True, momentum=0.2)
    n = 4 * 5 * 5
    np.testing.assert_allclose(rm.numpy(), 0.2 * x.mean((0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(rv.numpy(), 0.8 + 0.2 * x.var((0, 2, 3)) * n / (n - 1), rtol=1e-5)
    assert rm.data is before_rm                 # updated in place
    out = F.batch_norm(ty.tensor(x), rm, rv, training=False)
    np.testing.assert_allclose(out.numpy(), (x - _bcast(rm.numpy(), x))
                               / np.sqrt(_bcast(rv.numpy(), x) + 1e-5), rtol=1e-5, atol=1e-5)


def test_running_stats_accept_numpy_and_leave_graph_alone():
    rm, rv = np.zeros(2, np.float32), np.ones(2, np.float32)
    x = ty.randn(5, 2, requires_grad=True)
    F.batch_norm(x, rm, rv, training=True).sum().backward()
    assert rm.any() and x.grad is not None


def test_batch_norm_errors():
    with pytest.raises(ValueError, match=r"batch_norm: training needs more than one "
                                         r"value.*\(1, 3\)"):
        F.batch_norm(ty.randn(1, 3), None, None, training=True)
    with pytest.raises(ValueError, match=r"batch_norm: weight has shape \(4,\), expected \(3,\)"):
        F.batch_norm(ty.randn(2, 3), None, None, weight=ty.ones(4), training=True)
    with pytest.raises(ValueError, match="eval mode needs running_mean"):
        F.batch_norm(ty.randn(2, 3), None, None)


@pytest.mark.parametrize("x_shape", [(3, 4), (2, 3, 4), (4,)])
def test_linear(x_shape):
    check_op(lambda x, w, b: F.linear(x, w, b), lambda x, w, b: x @ w.T + b,
             [x_shape, (5, 4), (5,)])
    check_op(lambda x, w: F.linear(x, w), lambda x, w: x @ w.T, [x_shape, (5, 4)])


def test_linear_errors():
    with pytest.raises(ValueError, match=r"linear: input shape \(3, 5\).*weight shape \(2, 4\)"):
        F.linear(ty.randn(3, 5), ty.randn(2, 4))
    with pytest.raises(ValueError, match=r"linear: bias has shape \(3,\)"):
        F.linear(ty.randn(3, 4), ty.randn(2, 4), ty.randn(3))


def _fused_pair(seed):
    ty.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(),
                         nn.Conv2d(8, 5, 1), nn.BatchNorm2d(5), nn.ReLU())


@pytest.mark.parametrize("isa", ty.available_isas())
def test_sequential_fuses_batch_norm_and_relu_in_training_with_the_same_bits(isa):
    # a BatchNorm2d followed by ReLU / ReLU6 in a training Sequential runs as one op (the batch
    # norm's clamp): output, every gradient and the running statistics equal the unfused run,
    # forced here by a no-op hook on each activation (hooked modules are never fused)
    before = ty.current_isa()
    ty.set_isa(isa)
    try:
        x = np.random.default_rng(5).standard_normal((4, 3, 9, 11)).astype(np.float32) * 2
        g = np.random.default_rng(6).standard_normal((4, 5, 9, 11)).astype(np.float32)
        runs = []
        for fused in (True, False):
            model = _fused_pair(3).train()
            calls = []
            if not fused:
                for act in (model[2], model[5]):
                    act.register_forward_hook(lambda *args: calls.append(1))
            y = model(ty.tensor(x))
            y.backward(g)
            assert len(calls) == (0 if fused else 2)
            runs.append([y.numpy()] + [p.grad.numpy() for p in model.parameters()] +
                        [model[1].running_mean.numpy(), model[4].running_var.numpy()])
        for got, want in zip(*runs):
            np.testing.assert_array_equal(got, want)
        assert (runs[0][0] <= 6).all() and (runs[0][0] >= 0).all()
    finally:
        ty.set_isa(before)


def test_batch_norm_clamp_native_bits_and_checks():
    # the kernels' clamp against clamp(affine) and the gradient through clamp_backward
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4, 5, 6)).astype(np.float32) * 3
    scale, shift = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(
        np.float32)
    y = _C.batch_norm_affine(x, scale, shift, (0.0, 6.0))
    np.testing.assert_array_equal(y, _C.clamp(_C.batch_norm_affine(x, scale, shift), 0.0, 6.0))
    mean, var = _C.batch_norm_stats(x)
    inv = (1 / np.sqrt(var + 1e-5)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    want = _C.batch_norm_backward(_C.clamp_backward(g, y, 0.0, 6.0), x, mean, inv, scale, True)
    got = _C.batch_norm_backward(g, x, mean, inv, scale, True, (0.0, 6.0), (scale, shift))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="a clamp needs affine"):
        _C.batch_norm_backward(g, x, mean, inv, scale, True, (0.0, 6.0))
    with pytest.raises(ValueError, match=r"shift.*\(4,\)"):
        _C.batch_norm_backward(g, x, mean, inv, scale, True, (0.0, 6.0), (scale, shift[:3]))
    with pytest.raises(ValueError, match=r"clamp needs lo <= hi"):
        _C.batch_norm_affine(x, scale, shift, (6.0, 0.0))


def test_batch_norm_act_fuses_only_a_hook_free_training_pair():
    # nn.batch_norm_act(bn, act, x) == act(bn(x)) bit for bit; one op (no Clamp) only for a
    # training BatchNorm2d with ReLU / ReLU6, neither hooked
    x = ty.tensor(np.random.default_rng(8).standard_normal((2, 4, 5, 5)).astype(np.float32))
    bn, act = nn.BatchNorm2d(4).train(), nn.ReLU6()
    fused = nn.batch_norm_act(bn, act, x)
    assert fused._ctx.name == "BatchNormTrain"
    np.testing.assert_array_equal(fused.numpy(), act(nn.BatchNorm2d(4).train()(x)).numpy())
    seen = []
    act.register_forward_hook(lambda *args: seen.append(1))
    assert nn.batch_norm_act(bn, act, x)._ctx.name == "Clamp" and seen == [1]
    assert nn.norm.fused_clamp(bn.eval(), nn.ReLU()) is None
    assert nn.norm.fused_clamp(nn.BatchNorm2d(4), nn.LeakyReLU()) is None


@pytest.mark.parametrize("isa", ty.available_isas())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("clamp", [None, (0.0, 6.0)])
def test_batch_norm_backward_pass_mask_bits(isa, dtype, clamp):
    # the pass mask (a straight-through estimator after the batch norm) in the backward's
    # passes: the same bits as the masked gradient through the plain backward, planes of
    # whole vectors and with a tail (7 x 9, 5 x 1), an odd offset per channel
    before = ty.current_isa()
    ty.set_isa(isa)
    try:
        rng = np.random.default_rng(11)
        for shape in ((3, 5, 7, 9), (2, 3, 4, 8), (6, 4, 5, 1)):
            x = (rng.standard_normal(shape) * 3).astype(dtype)
            g = rng.standard_normal(shape).astype(dtype)
            keep = rng.random(shape) > 0.3
            scale = rng.standard_normal(shape[1]).astype(dtype)
            shift = rng.standard_normal(shape[1]).astype(dtype)
            mean, var = _C.batch_norm_stats(x)
            inv = (1 / np.sqrt(var + 1e-5)).astype(dtype)
            affine = None if clamp is None else (scale, shift)
            want = _C.batch_norm_backward(np.where(keep, g, 0).astype(dtype), x, mean, inv,
                                          scale, True, clamp, affine)
            got = _C.batch_norm_backward(g, x, mean, inv, scale, True, clamp, affine, keep)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
            assert np.abs(got[0] - _C.batch_norm_backward(g, x, mean, inv, scale, True, clamp,
                                                          affine)[0]).max() > 0.01
    finally:
        ty.set_isa(before)


def test_batch_norm_backward_pass_mask_checks():
    x = np.ones((2, 3, 4, 4), np.float32)
    v = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"pass_mask must be a bool or byte array of x's shape "
                                         r"\(2, 3, 4, 4\), got bool of shape \(2, 3, 4\)"):
        _C.batch_norm_backward(x, x, v, v, v, True, None, None, np.ones((2, 3, 4), bool))
    with pytest.raises(ValueError, match="pass_mask must be a bool or byte array"):
        _C.batch_norm_backward(x, x, v, v, v, True, None, None, x)


def _halves(y):
    """A straight-through map for the tests: y rounded to halves, passing where |y| < 1."""
    return (np.round(y * 2) / 2).astype(y.dtype), np.abs(y) < 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("clamp", [None, (0.0, 6.0)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_ste_is_the_straight_through_node_after_it(dtype, clamp, training):
    # F.batch_norm's ste in its own node (training, native clamp) or after it: the same bits
    # as StraightThrough applied to its output, forward and every gradient
    from tianyuan.ops.elementwise import StraightThrough
    rng = np.random.default_rng(12)
    x0 = (rng.standard_normal((4, 3, 5, 7)) * 2).astype(dtype)
    g = rng.standard_normal(x0.shape).astype(dtype)
    runs = []
    for inside in (True, False, None):  # None: no ste, for the mask's effect
        x = ty.tensor(x0, requires_grad=True)
        w = ty.tensor(np.array([1.5, -0.7, 0.9], dtype), requires_grad=True)
        b = ty.tensor(np.array([0.2, 0.1, -0.3], dtype), requires_grad=True)
        rm, rv = np.zeros(3, dtype), np.ones(3, dtype)
        if inside:
            y = F.batch_norm(x, rm, rv, w, b, training, clamp=clamp, ste=_halves)
        elif inside is None:
            y = F.batch_norm(x, rm, rv, w, b, training, clamp=clamp)
        else:
            y = StraightThrough.apply(F.batch_norm(x, rm, rv, w, b, training, clamp=clamp),
                                      fn=_halves)
        y.backward(ty.tensor(g))
        runs.append([y.numpy(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy()])
    for got, want in zip(runs[0], runs[1]):
        np.testing.assert_array_equal(got, want)
    assert np.abs(runs[0][1] - runs[2][1]).max() > 0.01


def test_batch_norm_stats_extremes_on_every_isa():
    # each channel's min and max in the statistics' pass (NaN where the channel has one);
    # mean and variance as without them
    from helpers import each_isa
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((3, 4, 5, 7)) * 3).astype(np.float32)
    x[2, 1, 4, 6], x[0, 3, 0, 0] = 50, -50
    with_nan = x.copy()
    with_nan[1, 2, 2, 2] = np.nan
    for isa in each_isa():
        mean, var, ends = _C.batch_norm_stats(x, True)
        assert ends.shape == (1, 4, 2)
        np.testing.assert_array_equal(ends[0, :, 0], x.min((0, 2, 3)), err_msg=isa)
        np.testing.assert_array_equal(ends[0, :, 1], x.max((0, 2, 3)), err_msg=isa)
        for got, want in zip((mean, var), _C.batch_norm_stats(x)):
            np.testing.assert_array_equal(got, want, err_msg=isa)
        ends = _C.batch_norm_stats(with_nan, True)[2][0]
        assert np.isnan(ends[2]).all() and not np.isnan(ends[[0, 1, 3]]).any()
    with pytest.raises(ValueError, match=r"extremes need values, got shape \(0, 4\)"):
        _C.batch_norm_stats(np.zeros((0, 4), np.float32), True)
