"""Optimizers against their update rules written out in numpy, groups, state dicts, clipping."""
import math

import numpy as np
import pytest

import tianyuan as ty
from tianyuan.optim import SGD, Adam, AdamW, RMSprop, clip_grad_norm_, clip_grad_value_

SHAPE = (3, 4)


def make_data(steps, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(SHAPE), [rng.standard_normal(SHAPE) for _ in range(steps)]


# ---------------------------------------------------------------- update rules, in numpy

def sgd_rule(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    def update(p, g, s, t):
        d = g + weight_decay * p
        if momentum:
            s["buf"] = d.copy() if t == 1 else momentum * s["buf"] + (1 - dampening) * d
            d = d + momentum * s["buf"] if nesterov else s["buf"]
        return p - lr * d
    return update


def adam_rule(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
              decoupled=False):
    b1, b2 = betas

    def update(p, g, s, t):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
        s["vmax"] = np.maximum(s.get("vmax", 0), s["v"])
        v = s["vmax"] if amsgrad else s["v"]
        m_hat, v_hat = s["m"] / (1 - b1 ** t), v / (1 - b2 ** t)
        return p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return update


def rmsprop_rule(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    def update(p, g, s, t):
        g = g + weight_decay * p
        s["sq"] = alpha * s.get("sq", 0) + (1 - alpha) * g * g
        s["ga"] = alpha * s.get("ga", 0) + (1 - alpha) * g
        var = s["sq"] - s["ga"] ** 2 if centered else s["sq"]
        step = g / (np.sqrt(var) + eps)
        if momentum:
            s["buf"] = momentum * s.get("buf", 0) + step
            step = s["buf"]
        return p - lr * step
    return update


CASES = [
    (SGD, dict(lr=0.1), sgd_rule(0.1)),
    (SGD, dict(lr=0.1, momentum=0.9), sgd_rule(0.1, 0.9)),
    (SGD, dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01),
     sgd_rule(0.1, 0.9, 0.3, 0.01)),
    (SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3),
     sgd_rule(0.05, 0.8, 0.0, 1e-3, True)),
    (Adam, dict(lr=0.01), adam_rule(0.01)),
    (Adam, dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1),
     adam_rule(0.01, (0.8, 0.9), 1e-8, 0.1)),
    (Adam, dict(lr=0.01, amsgrad=True, eps=1e-3), adam_rule(0.01, eps=1e-3, amsgrad=True)),
    (AdamW, dict(lr=0.01), adam_rule(0.01, weight_decay=1e-2, decoupled=True)),
    (AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True),
     adam_rule(0.01, weight_decay=0.1, amsgrad=True, decoupled=True)),
    (RMSprop, dict(lr=0.01), rmsprop_rule(0.01)),
    (RMSprop, dict(lr=0.01, alpha=0.9, momentum=0.9, weight_decay=0.1),
     rmsprop_rule(0.01, 0.9, 1e-8, 0.1, 0.9)),
    (RMSprop, dict(lr=0.01, centered=True, momentum=0.5),
     rmsprop_rule(0.01, centered=True, momentum=0.5)),
    (RMSprop, dict(lr=0.01, centered=True, eps=1e-2), rmsprop_rule(0.01, eps=1e-2, centered=True)),
]


@pytest.mark.parametrize("cls, kwargs, rule", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_first_steps_follow_update_rule(cls, kwargs, rule):
    p0, grads = make_data(5)
    p = ty.tensor(p0, requires_grad=True)  # float64 stays float64
    opt = cls([p], **kwargs)
    ref, state = p0.copy(), {}
    for t, g in enumerate(grads, 1):
        p.grad = ty.Tensor(g.copy())
        opt.step()
        ref = rule(ref, g, state, t)
        np.testing.assert_allclose(p.data, ref, rtol=1e-10, atol=1e-12, err_msg=f"step {t}")


@pytest.mark.parametrize("cls", [SGD, Adam, AdamW, RMSprop])
def test_float32_stays_float32_in_place(cls):
    p = ty.randn(2, 3, requires_grad=True)
    array = p.data
    p.grad = ty.ones(2, 3)
    cls([p], lr=0.1).step()
    assert p.data is array and p.dtype == np.float32


def test_step_after_real_backward_and_closure():
    p = ty.tensor([1.0, -2.0], requires_grad=True)
    opt = SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert float(loss) == 5.0
    np.testing.assert_allclose(p.data, [0.5, -1.0])


def test_params_without_grad_are_skipped():
    a, b = ty.ones(2, requires_grad=True), ty.ones(2, requires_grad=True)
    opt = Adam([a, b], lr=0.1)
    a.grad = ty.ones(2)
    opt.step()
    np.testing.assert_array_equal(b.data, [1, 1])
    assert b not in opt.state and opt.state[a]["step"] == 1


def test_param_groups_have_their_own_options():
    a, b = ty.tensor([1.0], requires_grad=True), ty.tensor([1.0], requires_grad=True)
    opt = SGD([{"params": [a]}, {"params": b, "lr": 0.01}], lr=0.1, momentum=0.5)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.01]
    assert opt.param_groups[1]["momentum"] == 0.5
    for _ in range(2):
        a.grad, b.grad = ty.ones(1), ty.ones(1)
        opt.step()
    np.testing.assert_allclose(a.data, [1 - 0.1 * (1 + 1.5)])
    np.testing.assert_allclose(b.data, [1 - 0.01 * (1 + 1.5)])


def test_add_param_group():
    a, b = ty.ones(1, requires_grad=True), ty.ones(1, requires_grad=True)
    opt = SGD([a], lr=0.1)
    opt.add_param_group({"params": [b], "lr": 1.0})
    b.grad = ty.ones(1)
    opt.step()
    np.testing.assert_allclose(b.data, [0.0])
    with pytest.raises(ValueError, match="more than one place"):
        opt.add_param_group({"params": [a]})


def test_zero_grad():
    p = ty.ones(3, requires_grad=True)
    opt = SGD([p], lr=0.1)
    p.grad = ty.ones(3)
    grad = p.grad.data
    opt.zero_grad(set_to_none=False)
    assert p.grad.data is grad and not grad.any()
    opt.zero_grad()
    assert p.grad is None


@pytest.mark.parametrize("make, match", [
    (lambda p: SGD([], lr=0.1), "empty parameter list"),
    (lambda p: SGD(p, lr=0.1), "single Tensor"),
    (lambda p: SGD([p]), "must set 'lr'"),
    (lambda p: SGD([p, p], lr=0.1), "more than one place"),
    (lambda p: SGD([ty.ones(2)], lr=0.1), "requires_grad=True"),
    (lambda p: SGD([{"params": {p}}], lr=0.1), "ordered"),
    (lambda p: SGD([p], lr=0.1, nesterov=True), "nesterov"),
    (lambda p: SGD([p], lr=-1.0), "lr must be >= 0"),
    (lambda p: Adam([p], betas=(0.9, 1.0)), "betas"),
])
def test_construction_errors(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make(ty.ones(2, requires_grad=True))


# ---------------------------------------------------------------- state dict

RESUME = [(SGD, dict(lr=0.1, momentum=0.9, nesterov=True)), (Adam, dict(lr=0.01, amsgrad=True)),
          (AdamW, dict(lr=0.01, weight_decay=0.1)),
          (RMSprop, dict(lr=0.01, momentum=0.9, centered=True))]


def two_groups(cls, kwargs, p0):
    params = [ty.tensor(x, dtype="float32", requires_grad=True) for x in p0]
    opt = cls([{"params": params[:1]}, {"params": params[1:], "lr": kwargs["lr"] / 2}], **kwargs)
    return params, opt


def run(params, opt, grads):
    for g in grads:
        for p, gi in zip(params, g):
            p.grad = ty.Tensor(gi.astype(np.float32))
        opt.step()


@pytest.mark.parametrize("cls, kwargs", RESUME, ids=lambda v: getattr(v, "__name__", None))
def test_state_dict_resume_continues_exactly(cls, kwargs, tmp_path):
    rng = np.random.default_rng(1)
    p0 = [rng.standard_normal((2, 3)), rng.standard_normal(4), rng.standard_normal(())]
    grads = [[rng.standard_normal(x.shape) for x in p0] for _ in range(6)]
    full_params, full = two_groups(cls, kwargs, p0)
    run(full_params, full, grads)

    first_params, first = two_groups(cls, kwargs, p0)
    run(first_params, first, grads[:3])
    ty.save({"params": [p.data for p in first_params], "optimizer": first.state_dict()},
            tmp_path / "ckpt.safetensors")
    ckpt = ty.load(tmp_path / "ckpt.safetensors")
    resumed_params, resumed = two_groups(cls, dict(kwargs, lr=123.0), ckpt["params"])
    resumed.load_state_dict(ckpt["optimizer"])
    assert resumed.param_groups[1]["lr"] == kwargs["lr"] / 2
    run(resumed_params, resumed, grads[3:])
    for a, b in zip(full_params, resumed_params):
        np.testing.assert_array_equal(a.data, b.data)


def test_state_dict_layout_is_pytorchs():
    a, b = ty.ones(2, requires_grad=True), ty.ones(3, requires_grad=True)
    opt = SGD([{"params": [a]}, {"params": [b]}], lr=0.1, momentum=0.9)
    b.grad = ty.ones(3)
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1]]
    assert list(sd["state"]) == [1] and sd["state"][1]["momentum_buffer"].shape == (3,)
    assert sd["param_groups"][0]["momentum"] == 0.9


def test_load_state_dict_copies_state():
    a = ty.ones(2, requires_grad=True)
    opt = SGD([a], lr=0.1, momentum=0.9)
    a.grad = ty.ones(2)
    opt.step()
    other = SGD([ty.ones(2, requires_grad=True)], lr=0.1, momentum=0.9)
    other.load_state_dict(opt.state_dict())
    buf = next(iter(other.state.values()))["momentum_buffer"]
    assert buf is not opt.state[a]["momentum_buffer"]


@pytest.mark.parametrize("shapes, match", [
    ([[(2,)], [(3,)]], "has 1 parameter groups, this optimizer has 2"),
    ([[(2,), (3,)]], "group 0 has 1 parameters in the state dict and 2 in this"),
    ([[(5,)]], r"parameter 0 in group 0 has shape \(2,\).*shape \(5,\)"),
])
def test_load_state_dict_mismatch_errors(shapes, match):
    src = ty.ones(2, requires_grad=True)
    opt = SGD([src], lr=0.1, momentum=0.9)
    src.grad = ty.ones(2)
    opt.step()
    groups = [{"params": [ty.ones(*s, requires_grad=True) for s in g]} for g in shapes]
    with pytest.raises(ValueError, match=match):
        SGD(groups, lr=0.1, momentum=0.9).load_state_dict(opt.state_dict())


# ---------------------------------------------------------------- clipping

def test_clip_grad_norm():
    a, b, c = (ty.zeros(2, requires_grad=True) for _ in range(3))
    a.grad, b.grad = ty.tensor([3.0, 0.0]), ty.tensor([0.0, 4.0])
    total = clip_grad_norm_([a, b, c], max_norm=1.0)
    assert total == pytest.approx(5.0)
    clipped = np.concatenate([a.grad.data, b.grad.data])
    np.testing.assert_allclose(clipped, [0.6, 0, 0, 0.8], rtol=1e-5)
    assert clip_grad_norm_([a, b], max_norm=10.0) == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(a.grad.data, [0.6, 0.0], rtol=1e-5)  # below max: untouched


def test_clip_grad_norm_other_norms():
    p = ty.zeros(3, requires_grad=True)
    p.grad = ty.tensor([1.0, -3.0, 2.0])
    assert clip_grad_norm_(p, 100.0, norm_type=math.inf) == 3.0
    assert clip_grad_norm_(p, 100.0, norm_type=1) == pytest.approx(6.0)
    assert clip_grad_norm_([ty.zeros(1, requires_grad=True)], 1.0) == 0.0
    p.grad = ty.tensor([np.inf, 0.0, 0.0])
    with pytest.raises(RuntimeError, match="clip_grad_norm_"):
        clip_grad_norm_(p, 1.0, error_if_nonfinite=True)


def test_clip_grad_value():
    p = ty.zeros(3, requires_grad=True)
    p.grad = ty.tensor([1.0, -3.0, 0.2])
    clip_grad_value_([p], 0.5)
    np.testing.assert_allclose(p.grad.data, [0.5, -0.5, 0.2])


# ---------------------------------------------------------------- parity with PyTorch (optional)

@pytest.mark.parametrize("cls, kwargs, rule", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_parity_with_torch(cls, kwargs, rule):
    torch = pytest.importorskip("torch")
    p0, grads = make_data(5, seed=3)
    ours = ty.tensor(p0, requires_grad=True)
    theirs = torch.nn.Parameter(torch.tensor(p0))
    opt, ref = cls([ours], **kwargs), getattr(torch.optim, cls.__name__)([theirs], **kwargs)
    for g in grads:
        ours.grad, theirs.grad = ty.Tensor(g.copy()), torch.tensor(g)
        opt.step()
        ref.step()
        np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("weight_decay,dampening,nesterov", [
    (0.0, 0.0, False), (1e-4, 0.0, True), (5e-4, 0.1, False), (0.0, 0.5, False)])
def test_sgd_native_update_has_numpys_bits(weight_decay, dampening, nesterov, monkeypatch):
    # after the first step float32 parameters update in one native pass (_C.sgd_momentum_
    # update, OpenMP from 65536 values): each operation rounded as numpy's, in its order
    from tianyuan.optim import sgd
    calls = []
    native = sgd._C.sgd_momentum_update
    monkeypatch.setattr(sgd, "_C", type("C", (), {"sgd_momentum_update": staticmethod(
        lambda *args: calls.append(1) or native(*args))}))
    rng = np.random.default_rng(11)
    shapes = [(300, 301), (7, 3)]  # 90300 values: parallel blocks; a small one
    params = [ty.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
              for s in shapes]
    want = [p.numpy().copy() for p in params]
    bufs = [None] * len(params)
    opt = SGD(params, lr=0.05, momentum=0.9, dampening=dampening,
              weight_decay=weight_decay, nesterov=nesterov)
    for _ in range(3):
        grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        for i, (p, g) in enumerate(zip(params, grads)):
            p.grad = ty.tensor(g)
            d = g + weight_decay * want[i] if weight_decay else g
            if bufs[i] is None:
                bufs[i] = d.copy()
            else:
                bufs[i] = bufs[i] * 0.9 + ((1.0 - dampening) * d if dampening else d)
            d = d + 0.9 * bufs[i] if nesterov else bufs[i]
            want[i] = want[i] - 0.05 * d
        opt.step()
    for p, w in zip(params, want):
        np.testing.assert_array_equal(p.numpy(), w)
    for p, b in zip(params, bufs):
        np.testing.assert_array_equal(opt.state[p]["momentum_buffer"], b)
    assert len(calls) == 2 * len(params)  # steps 2 and 3; the first creates the buffers


@pytest.mark.parametrize("cls,weight_decay", [(Adam, 0.0), (Adam, 1e-2), (AdamW, 5e-2)])
def test_adam_native_update_has_numpys_bits(cls, weight_decay, monkeypatch):
    # float32 Adam / AdamW without amsgrad update in one native pass (_C.adam_update): each
    # operation rounded as adam.py's numpy, in its order, the step's constants from Python's
    from tianyuan.optim import adam
    calls = []
    native = adam._C.adam_update
    monkeypatch.setattr(adam, "_C", type("C", (), {"adam_update": staticmethod(
        lambda *args: calls.append(1) or native(*args))}))
    rng = np.random.default_rng(12)
    shapes = [(300, 301), (5, 4)]
    params = [ty.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
              for s in shapes]
    want = [p.numpy().copy() for p in params]
    ms = [np.zeros(s, np.float32) for s in shapes]
    vs = [np.zeros(s, np.float32) for s in shapes]
    lr, (b1, b2), eps = 2e-3, (0.9, 0.999), 1e-8
    opt = cls(params, lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay)
    for t in range(1, 4):
        for i, p in enumerate(params):
            g = rng.standard_normal(shapes[i]).astype(np.float32)
            p.grad = ty.tensor(g)
            if weight_decay and cls is AdamW:
                want[i] = want[i] * (1.0 - lr * weight_decay)
            elif weight_decay:
                g = g + weight_decay * want[i]
            ms[i] = ms[i] + (1.0 - b1) * (g - ms[i])
            vs[i] = vs[i] * b2 + (1.0 - b2) * g * g
            denom = np.sqrt(vs[i]) / math.sqrt(1.0 - b2 ** t) + eps
            want[i] = want[i] - (lr / (1.0 - b1 ** t)) * ms[i] / denom
        opt.step()
    for p, w, m, v in zip(params, want, ms, vs):
        np.testing.assert_array_equal(p.numpy(), w)
        np.testing.assert_array_equal(opt.state[p]["exp_avg"], m)
        np.testing.assert_array_equal(opt.state[p]["exp_avg_sq"], v)
    assert len(calls) == 3 * len(params)
