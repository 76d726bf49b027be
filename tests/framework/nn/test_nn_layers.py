import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn
from helpers import gradcheck


def test_parameter_names_and_shapes_match_pytorch():
    shapes = {k: v.shape for k, v in nn.Conv2d(8, 16, (3, 5), groups=2).state_dict().items()}
    assert shapes == {"weight": (16, 4, 3, 5), "bias": (16,)}
    shapes = {k: v.shape for k, v in nn.ConvTranspose2d(8, 16, 4, groups=2).state_dict().items()}
    assert shapes == {"weight": (8, 8, 4, 4), "bias": (16,)}
    assert list(nn.Conv2d(3, 4, 1, bias=False).state_dict()) == ["weight"]
    assert {k: v.shape for k, v in nn.Linear(3, 7).state_dict().items()} == {
        "weight": (7, 3), "bias": (7,)}
    bn = nn.BatchNorm2d(5).state_dict()
    assert list(bn) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert (bn["weight"] == 1).all() and (bn["bias"] == 0).all()
    assert (bn["running_mean"] == 0).all() and (bn["running_var"] == 1).all()
    assert list(nn.BatchNorm1d(5, affine=False, track_running_stats=False).state_dict()) == []
    with pytest.raises(ValueError, match="divisible by groups=3"):
        nn.Conv2d(4, 6, 3, groups=3)


def test_linear_matches_numpy():
    m = nn.Linear(4, 3)
    x = ty.randn(2, 5, 4)
    expected = x.numpy() @ m.weight.numpy().T + m.bias.numpy()
    np.testing.assert_allclose(m(x).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_conv_layers_call_functional():
    x = ty.randn(2, 4, 7, 7)
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2)
    np.testing.assert_array_equal(conv(x).numpy(),
                                  F.conv2d(x, conv.weight, conv.bias, 2, 1, 1, 2).numpy())
    assert conv(x).shape == (2, 6, 4, 4)
    assert nn.Conv2d(4, 6, 4, padding="same")(x).shape == (2, 6, 7, 7)
    assert nn.Conv2d(4, 6, 3, padding="valid")(x).shape == (2, 6, 5, 5)
    with pytest.raises(ValueError, match="stride 1"):
        nn.Conv2d(4, 6, 3, stride=2, padding="same")
    up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
    assert up(x).shape == (2, 6, 14, 14)
    np.testing.assert_array_equal(
        up(x).numpy(), F.conv_transpose2d(x, up.weight, up.bias, 2, 1, 1, 1, 1).numpy())
    # a 1x1 convolution is a per-pixel matrix product
    one = nn.Conv2d(4, 3, 1)
    expected = np.einsum("oc,nchw->nohw", one.weight.numpy()[:, :, 0, 0], x.numpy())
    np.testing.assert_allclose(one(x).numpy(), expected + one.bias.numpy()[None, :, None, None],
                               rtol=1e-5, atol=1e-5)


def test_pooling_layers():
    x = ty.randn(2, 3, 8, 8)
    np.testing.assert_array_equal(nn.MaxPool2d(3, 2, 1)(x).numpy(),
                                  F.max_pool2d(x, 3, 2, 1).numpy())
    np.testing.assert_array_equal(nn.AvgPool2d(2)(x).numpy(), F.avg_pool2d(x, 2).numpy())
    np.testing.assert_allclose(nn.AdaptiveAvgPool2d(1)(x).numpy(),
                               x.numpy().mean((2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    assert nn.MaxPool2d(2)(x).shape == (2, 3, 4, 4)


def test_activation_layers_call_functional():
    x = ty.randn(3, 4) * 4
    pairs = [(nn.ReLU(), F.relu), (nn.ReLU6(inplace=True), F.relu6),
             (nn.LeakyReLU(0.2), lambda t: F.leaky_relu(t, 0.2)), (nn.Sigmoid(), F.sigmoid),
             (nn.Tanh(), F.tanh), (nn.Hsigmoid(), F.hsigmoid), (nn.Hswish(), F.hswish),
             (nn.Softplus(2.0, 5.0), lambda t: F.softplus(t, 2.0, 5.0)),
             (nn.Softmax(axis=0), lambda t: F.softmax(t, 0)), (nn.Softmax(dim=1), F.softmax),
             (nn.Identity(7, k=1), lambda t: t), (nn.Flatten(0), lambda t: t.reshape(-1))]
    for module, fn in pairs:
        np.testing.assert_array_equal(module(x).numpy(), fn(x).numpy(), err_msg=repr(module))


def test_dropout_module_follows_training_flag():
    m = nn.Dropout(0.5)
    x = ty.ones(50, 50)
    assert (m(x).numpy() == 0).any()
    assert m.eval()(x) is x
    assert nn.Flatten()(ty.zeros(2, 3, 4, 5)).shape == (2, 60)


def _bn_batches():
    rng = np.random.default_rng(0)
    return [rng.normal(i, 1 + i, (4, 3, 2, 2)).astype(np.float32) for i in range(3)]


def test_batchnorm2d_momentum_and_counter():
    bn = nn.BatchNorm2d(3, momentum=0.1)
    for x in _bn_batches():
        bn(ty.tensor(x))
    expected_mean, expected_var = np.zeros(3), np.ones(3)
    for x in _bn_batches():
        expected_mean = 0.9 * expected_mean + 0.1 * x.mean((0, 2, 3))
        expected_var = 0.9 * expected_var + 0.1 * x.var((0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), expected_mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), expected_var, rtol=1e-5)
    assert int(bn.num_batches_tracked.numpy()) == 3


def test_batchnorm2d_cumulative_average_when_momentum_is_none():
    bn = nn.BatchNorm2d(3, momentum=None)
    batches = _bn_batches()
    for x in batches:
        bn(ty.tensor(x))
    np.testing.assert_allclose(bn.running_mean.numpy(),
                               np.mean([x.mean((0, 2, 3)) for x in batches], 0), rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(),
                               np.mean([x.var((0, 2, 3), ddof=1) for x in batches], 0), rtol=1e-5)


def test_batchnorm_eval_and_untracked():
    bn = nn.BatchNorm2d(3)
    bn.running_mean.data[...] = [1, 2, 3]
    bn.running_var.data[...] = [4, 1, 0.25]
    bn.weight.data[...] = 2
    x = ty.randn(2, 3, 2, 2)
    out = bn.eval()(x).numpy()
    expected = 2 * (x.numpy() - [[[[1]], [[2]], [[3]]]]) / np.sqrt(
        np.array([4, 1, 0.25])[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert int(bn.num_batches_tracked.numpy()) == 0
    free = nn.BatchNorm1d(3, track_running_stats=False).eval()
    y = free(ty.randn(8, 3) * 5 + 2).numpy()      # batch statistics even in eval
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-5)
    with pytest.raises(ValueError, match=r"BatchNorm2d: expected a 4-D input, got shape \(2, 3\)"):
        bn(ty.randn(2, 3))
    with pytest.raises(ValueError, match=r"BatchNorm1d: input has 4 channels"):
        nn.BatchNorm1d(3)(ty.randn(2, 4))


def test_small_convnet_gradient_float64():
    ty.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.Hswish(),
                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(12, 2)).double()
    x = np.random.default_rng(0).normal(size=(2, 2, 4, 4))
    gradcheck(lambda t: net(t), [x])
    assert net[0].weight.grad is not None and net[0].weight.grad.dtype == np.float64


def test_mlp_learns_xor_with_plain_gradient_descent():
    ty.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    x = ty.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    y = ty.tensor([[0.0], [1.0], [1.0], [0.0]])
    for _ in range(400):
        loss = F.binary_cross_entropy_with_logits(net(x), y)
        net.zero_grad()
        loss.backward()
        with ty.no_grad():
            for p in net.parameters():
                p.data -= 1.0 * p.grad.data
    assert loss.item() < 0.05
    np.testing.assert_array_equal((net(x).numpy() > 0).astype(np.float32), y.numpy())
