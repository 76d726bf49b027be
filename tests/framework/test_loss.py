import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from helpers import check_op

RNG = np.random.default_rng(0)


def _reduce(loss, reduction, denom=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (loss.size if denom is None else denom)


def ce_ref(logits, target, weight=None, ignore_index=-100, reduction="mean", smoothing=0.0):
    """PyTorch's cross entropy, element by element in float64."""
    c = logits.shape[1]
    rows = np.moveaxis(logits, 1, -1).reshape(-1, c).astype(np.float64)   # (M, C)
    w = np.ones(c) if weight is None else np.asarray(weight, np.float64)
    shifted = rows - rows.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    losses, denom = [], 0.0
    for row, t in zip(logp, target.reshape(-1)):
        if t == ignore_index:
            losses.append(0.0)
            continue
        nll, smooth = -w[t] * row[t], -(w * row).sum()
        losses.append((1 - smoothing) * nll + smoothing / c * smooth)
        denom += w[t]
    return _reduce(np.array(losses).reshape(target.shape), reduction, denom)


def _targets(shape, classes, ignore=None, n_ignored=0):
    t = RNG.integers(0, classes, shape)
    if ignore is not None:
        t.reshape(-1)[RNG.choice(t.size, n_ignored, replace=False)] = ignore
    return t


W5 = np.array([0.5, 1.0, 2.0, 1.5, 0.25])


@pytest.mark.parametrize("shape,kwargs,ignore", [
    ((4, 5), {}, None),
    ((4, 5), {"reduction": "sum", "weight": W5}, None),
    ((4, 5), {"reduction": "none"}, None),
    ((6, 5), {"weight": W5, "label_smoothing": 0.1}, None),
    ((6, 5), {"weight": W5, "ignore_index": -100}, -100),
    ((6, 5), {"label_smoothing": 0.2, "ignore_index": 3, "weight": W5}, 3),
    ((2, 5, 2, 3), {"ignore_index": 255, "label_smoothing": 0.1}, 255),
    ((2, 5, 2, 3), {"reduction": "none", "weight": W5, "ignore_index": 255}, 255),
])
def test_cross_entropy(shape, kwargs, ignore):
    target = _targets(shape[:1] + shape[2:], shape[1], ignore, n_ignored=2)
    kw = {k: v for k, v in kwargs.items() if k != "label_smoothing"}
    smoothing = kwargs.get("label_smoothing", 0.0)
    check_op(lambda x: F.cross_entropy(x, ty.tensor(target), **kwargs),
             lambda x: ce_ref(x, target, smoothing=smoothing, **kw), [shape])


def test_cross_entropy_known_values():
    # uniform logits: -log(1/C) whatever the smoothing; all ignored: 0/0 as in PyTorch
    logits = ty.zeros(3, 4)
    for eps in (0.0, 0.3):
        loss = F.cross_entropy(logits, ty.tensor([0, 1, 3]), label_smoothing=eps)
        np.testing.assert_allclose(loss.item(), np.log(4), rtol=1e-6)
    with np.errstate(invalid="ignore"):
        assert np.isnan(F.cross_entropy(logits, ty.tensor([-100] * 3)).item())
    assert F.cross_entropy(logits, ty.tensor([-100] * 3), reduction="sum").item() == 0


def test_cross_entropy_bad_targets():
    logits = ty.randn(4, 3)
    with pytest.raises(TypeError, match=r"cross_entropy: target must hold integer.*\(4, 3\)"):
        F.cross_entropy(logits, ty.tensor([0.0, 1.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match=r"cross_entropy: target shape \(4, 1\).*\(4, 3\)"):
        F.cross_entropy(logits, ty.tensor([[0], [1], [2], [1]]))
    with pytest.raises(IndexError, match=r"cross_entropy: .*class index 3 outside \[0, 3\)"):
        F.cross_entropy(logits, ty.tensor([0, 3, 1, 1]))
    with pytest.raises(IndexError, match="class index -1"):
        F.cross_entropy(logits, ty.tensor([0, -1, 1, 1]))
    with pytest.raises(ValueError, match=r"cross_entropy: weight has shape \(2,\)"):
        F.cross_entropy(logits, ty.tensor([0, 1, 1, 1]), weight=ty.ones(2))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(logits, ty.tensor([0, 1, 1, 1]), reduction="avg")


def _log_sigmoid(x):
    return -np.logaddexp(0, -x)


def bce_ref(x, t, weight=None, pos_weight=None, reduction="mean"):
    pw = 1.0 if pos_weight is None else pos_weight
    loss = -(pw * t * _log_sigmoid(x) + (1 - t) * _log_sigmoid(-x))
    return _reduce(loss * (1.0 if weight is None else weight), reduction)


@pytest.mark.parametrize("kwargs", [
    {}, {"reduction": "sum"}, {"reduction": "none", "weight": RNG.uniform(0.5, 2, (3, 1))},
    {"pos_weight": np.array([1.0, 2.0, 0.5, 3.0])},
    {"pos_weight": np.array([1.0, 2.0, 0.5, 3.0]), "weight": RNG.uniform(0.5, 2, (4,))},
])
def test_bce_with_logits(kwargs):
    target = RNG.uniform(0, 1, (3, 4))
    check_op(lambda x: F.binary_cross_entropy_with_logits(x, ty.tensor(target), **kwargs),
             lambda x: bce_ref(x, target, **kwargs), [(3, 4)], low=-4, high=4)


def test_bce_gradient_reaches_target_and_survives_huge_logits():
    check_op(lambda x, t: F.binary_cross_entropy_with_logits(x, t),
             lambda x, t: bce_ref(x, t), [(3, 4), (3, 4)], low=0.0, high=1.0)
    x = ty.tensor([-500.0, 500.0], requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(x, ty.tensor([1.0, 0.0]), reduction="sum")
    np.testing.assert_allclose(loss.item(), 1000.0)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [-1.0, 1.0])


def test_bce_shape_errors():
    with pytest.raises(ValueError, match=r"binary_cross_entropy_with_logits: target shape \(3,\)"):
        F.binary_cross_entropy_with_logits(ty.randn(3, 4), ty.zeros(3))
    with pytest.raises(ValueError, match=r"pos_weight of shape \(3,\)"):
        F.binary_cross_entropy_with_logits(ty.randn(3, 4), ty.zeros(3, 4), pos_weight=ty.ones(3))


def focal_ref(x, t, alpha=0.25, gamma=2.0, reduction="none"):
    p = 1 / (1 + np.exp(-x))
    ce = bce_ref(x, t, reduction="none")
    p_t = p * t + (1 - p) * (1 - t)
    loss = ce * (1 - p_t) ** gamma
    if alpha >= 0:
        loss = loss * (alpha * t + (1 - alpha) * (1 - t))
    return _reduce(loss, reduction)


@pytest.mark.parametrize("kwargs", [{}, {"reduction": "sum"}, {"alpha": -1, "gamma": 1.5},
                                    {"alpha": 0.5, "gamma": 0.0, "reduction": "mean"}])
def test_sigmoid_focal_loss(kwargs):
    target = (RNG.uniform(0, 1, (4, 3)) > 0.7).astype(np.float64)
    check_op(lambda x: F.sigmoid_focal_loss(x, ty.tensor(target), **kwargs),
             lambda x: focal_ref(x, target, **kwargs), [(4, 3)], low=-3, high=3)


def test_focal_with_gamma_zero_and_no_alpha_is_bce():
    # logits of +-40 saturate p to 1.0 in float32: (1 - p_t) ** 0 once gave NaN gradients there
    data = np.concatenate([RNG.standard_normal((5, 2)), [[40.0, -40.0]]]).astype(np.float32)
    t = ty.tensor((np.arange(12).reshape(6, 2) % 3 == 0).astype(np.float32))
    x, y = ty.tensor(data, requires_grad=True), ty.tensor(data, requires_grad=True)
    focal = F.sigmoid_focal_loss(x, t, alpha=-1, gamma=0.0)
    bce = F.binary_cross_entropy_with_logits(y, t, reduction="none")
    np.testing.assert_allclose(focal.numpy(), bce.numpy())
    focal.sum().backward()
    bce.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-6, atol=1e-7)


def smooth_l1_ref(x, y, beta=1.0, reduction="mean"):
    d = np.abs(x - y)
    return _reduce(np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


@pytest.mark.parametrize("fn,ref", [
    (F.smooth_l1_loss, smooth_l1_ref),
    (lambda x, y: F.smooth_l1_loss(x, y, beta=0.5, reduction="sum"),
     lambda x, y: smooth_l1_ref(x, y, 0.5, "sum")),
    (lambda x, y: F.smooth_l1_loss(x, y, beta=0.0, reduction="none"), lambda x, y: np.abs(x - y)),
    (F.l1_loss, lambda x, y: np.abs(x - y).mean()),
    (lambda x, y: F.l1_loss(x, y, "none"), lambda x, y: np.abs(x - y)),
    (F.mse_loss, lambda x, y: ((x - y) ** 2).mean()),
    (lambda x, y: F.mse_loss(x, y, "sum"), lambda x, y: ((x - y) ** 2).sum()),
])
def test_regression_losses(fn, ref):
    check_op(fn, ref, [(3, 4), (3, 4)])


@pytest.mark.parametrize("fn", [F.l1_loss, F.mse_loss, F.smooth_l1_loss])
def test_regression_shape_error(fn):
    with pytest.raises(ValueError, match=r"loss: target shape \(4,\) differs from input "
                                         r"shape \(3, 4\)"):
        fn(ty.randn(3, 4), ty.randn(4))
