"""Every registered model: shapes, a training step, state round trip, fuse groups, head reset,
its float graph (jit.trace)."""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn, optim, zoo
from zoo_cases import BIG, FORWARD_ONLY, MODELS, batch, cached, input_shape

ACTIVATIONS = (nn.ReLU, nn.ReLU6)


@pytest.mark.parametrize("name", MODELS)
def test_output_shape(name):
    shape = input_shape(name, batch=1 if name in BIG else 2)
    with ty.no_grad():
        out = cached(name)(batch(shape)[0])
    assert out.shape == (shape[0], zoo.model_card(name)["num_classes"])
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("name", [n for n in MODELS if n not in FORWARD_ONLY])
def test_training_steps_lower_the_loss(name):
    ty.manual_seed(0)
    model = zoo.get_model(name, num_classes=10).train()
    for module in model.modules():   # one fixed function of the weights: no dropout masks
        if isinstance(module, nn.Dropout):
            module.eval()
    x, y = batch(input_shape(name, batch=4))
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters()), "a parameter got no gradient"
    # a step of lr = 0.05 / |g|^2 should lower the loss by about 0.05 (first order), which
    # also checks that the gradients are the loss's gradients
    g2 = sum(float(np.sum(p.grad.data.astype(np.float64) ** 2)) for p in model.parameters())
    opt = optim.SGD(model.parameters(), lr=0.05 / g2)
    losses = [float(loss.item())]
    for _ in range(2):
        opt.step()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        losses.append(float(loss.item()))
    assert np.isfinite(losses).all() and losses[0] > losses[1] > losses[2], losses
    assert 0.025 < losses[0] - losses[1] < 0.075, losses


@pytest.mark.parametrize("name", MODELS)
def test_state_dict_round_trip(name, tmp_path):
    model = cached(name)
    state = model.state_dict()
    ty.save(state, tmp_path / "model.safetensors")
    loaded = ty.load(tmp_path / "model.safetensors")
    assert list(loaded) == list(state)
    for key, value in state.items():
        assert loaded[key].dtype == value.dtype and loaded[key].shape == value.shape, key
        assert np.array_equal(loaded[key], value), key
    ty.manual_seed(1)   # a differently initialised copy takes the state bit-exactly
    fresh = zoo.get_model(name)
    fresh.load_state_dict(loaded)
    assert all(np.array_equal(a, b) for a, b in zip(fresh.state_dict().values(), state.values()))


def _trace(model, shape):
    """Run forward with hooks on every leaf: [(name, module, input, output)] in call order."""
    calls, handles = [], []
    for name, module in model.named_modules():
        if not module._modules:
            hook = (lambda n: lambda m, args, out: calls.append((n, m, args, out)))(name)
            handles.append(module.register_forward_hook(hook))
    with ty.no_grad():
        model(batch(shape)[0])
    for handle in handles:
        handle.remove()
    return calls


@pytest.mark.parametrize("name", MODELS)
def test_fuse_groups_are_conv_bn_act_in_forward_order(name):
    model = cached(name)
    calls = _trace(model, (1, 3, 32, 32))
    names = [c[0] for c in calls]
    # QAT needs each activation / add / concat to be its own module, called once
    assert len(names) == len(set(names)), "a module is called twice in forward"
    by_name = {c[0]: c for c in calls}
    groups = model.fuse_groups()
    flat = [n for group in groups for n in group]
    assert len(flat) == len(set(flat)), "a module is in two fuse groups"
    for group in groups:
        modules = [model.get_submodule(n) for n in group]
        assert isinstance(modules[0], nn.Conv2d) and isinstance(modules[1], nn.BatchNorm2d)
        assert len(group) == 2 or (len(group) == 3 and isinstance(modules[2], ACTIVATIONS))
        for prev, cur in zip(group, group[1:]):   # data flows conv -> bn -> act directly
            assert by_name[cur][2][0] is by_name[prev][3], (group, prev, cur)
    fused_convs = {g[0] for g in groups}
    convs = {n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert convs == fused_convs, "every conv is followed by a BN in these models"


@pytest.mark.parametrize("name", MODELS)
def test_quant_points(name):
    model = cached(name)
    kinds = {type(m) for m in model.modules()}
    assert isinstance(model.quant, nn.QuantStub) and isinstance(model.dequant, nn.DequantStub)
    calls = [c[0] for c in _trace(model, (1, 3, 32, 32))]
    assert calls[0] == "quant" and calls[-1] == "dequant"
    if name.startswith("resnet") or name.startswith("shufflenet_v1"):
        assert nn.AddReLU in kinds
    if name.startswith("shufflenet"):
        assert nn.Concat in kinds


@pytest.mark.parametrize("name", [n for n in MODELS if n not in BIG])
def test_reset_classifier(name):
    ty.manual_seed(0)
    model = zoo.get_model(name, num_classes=7)
    head = model.get_submodule(model.classifier_name)
    assert isinstance(head, nn.Linear) and head.out_features == 7
    before = {k: v for k, v in model.state_dict().items() if not k.startswith(
        model.classifier_name)}
    assert model.reset_classifier(3) is model and model.num_classes == 3
    with ty.no_grad():
        assert model.eval()(batch((1, 3, 32, 32))[0]).shape == (1, 3)
    after = model.state_dict()
    assert after[f"{model.classifier_name}.weight"].shape[0] == 3
    assert all(np.array_equal(after[k], v) for k, v in before.items())
    with pytest.raises(ValueError, match="num_classes"):
        model.reset_classifier(0)


@pytest.mark.parametrize("name", [n for n in MODELS if n not in BIG])
def test_float_model_traces_to_the_same_result(name):
    model = cached(name)
    graph = ty.jit.trace(model, batch(input_shape(name))[0])
    x = batch(input_shape(name), seed=1)[0]
    with ty.no_grad():
        np.testing.assert_array_equal(graph(x).numpy(), model(x).numpy())
