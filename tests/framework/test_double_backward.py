"""Double backward: `autograd.grad(..., create_graph=True)` for every op a WGAN-GP critic
uses (the zoo's CNN32 and ResNet critics: conv2d with stride and padding, linear, leaky
ReLU, ReLU, average pooling, sum/mean, reshape) and the elementwise ops of the penalty,
each checked against finite differences in float64 (helpers.gradgradcheck)."""
import numpy as np
import pytest
from helpers import gradgradcheck

import tianyuan as ty
import tianyuan.functional as F

R = np.random.default_rng(0)


def u(*shape, low=-2.0, high=2.0):
    return R.uniform(low, high, shape)


def positive(*shape):
    return R.uniform(0.5, 2.0, shape)


ELEMENTWISE = {
    "add_broadcast": (lambda a, b: a + b, [u(2, 3), u(3)]),
    "sub_broadcast": (lambda a, b: a - b, [u(2, 1), u(2, 3)]),
    "mul_broadcast": (lambda a, b: a * b * a, [u(2, 3), u(1, 3)]),
    "div": (lambda a, b: a / b, [u(2, 3), positive(2, 3)]),
    "pow_scalar": (lambda a: a ** 3.0, [u(2, 3)]),
    "pow_square": (lambda a: a ** 2, [u(4)]),
    "pow_tensor": (lambda a, b: a ** b, [positive(2, 3), u(2, 3)]),
    "sqrt": (lambda a: F.sqrt(a), [positive(2, 3)]),
    "exp": (lambda a: F.exp(a), [u(2, 3)]),
    "log": (lambda a: F.log(a), [positive(2, 3)]),
    "neg": (lambda a: -a * a, [u(3)]),
    "tanh": (lambda a: F.tanh(a), [u(2, 3)]),
    "sigmoid": (lambda a: F.sigmoid(a), [u(2, 3)]),
    "softplus": (lambda a: F.softplus(a * 10.0), [u(2, 3)]),
    "maximum": (lambda a, b: F.maximum(a, b) * a, [u(2, 3), u(2, 3)]),
    "leaky_relu": (lambda a: F.leaky_relu(a, 0.1) * a, [u(2, 3)]),
    "relu": (lambda a: F.relu(a) * a, [u(2, 3)]),
    "abs": (lambda a: abs(a) * a, [u(2, 3)]),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_double_backward(name):
    fn, inputs = ELEMENTWISE[name]
    gradgradcheck(fn, inputs)


REDUCE_SHAPE = {
    "sum_all": (lambda a: a.sum() * a, [u(2, 3)]),
    "sum_axes": (lambda a: a.sum(axis=(0, 2)) ** 2, [u(2, 3, 2)]),
    "sum_keepdims": (lambda a: a.sum(axis=1, keepdims=True) * a, [u(2, 3)]),
    "mean": (lambda a: a.mean(axis=1) ** 2, [u(2, 3)]),
    "max": (lambda a: a.max(axis=1) * a.sum(axis=1), [u(2, 4)]),
    "reshape_flatten": (lambda a: F.flatten(a.reshape(3, 2, 2), 1) ** 2, [u(2, 6)]),
    "transpose": (lambda a, b: F.transpose(a) * b, [u(2, 3), u(3, 2)]),
    "broadcast_to": (lambda a: F.broadcast_to(a, (2, 3)) ** 2, [u(1, 3)]),
    "concat_slice": (lambda a, b: F.concat([a * a, b], axis=1)[:, 1:] ** 2, [u(2, 2), u(2, 3)]),
}


@pytest.mark.parametrize("name", sorted(REDUCE_SHAPE))
def test_reduction_and_shape_double_backward(name):
    fn, inputs = REDUCE_SHAPE[name]
    gradgradcheck(fn, inputs)


@pytest.mark.parametrize("shapes", [((2, 3), (3, 4)), ((2, 2, 3), (3, 2)), ((3,), (3, 2)),
                                    ((2, 3), (3,)), ((3,), (3,))])
def test_matmul_double_backward(shapes):
    gradgradcheck(lambda a, b: F.tanh(a @ b), [u(*shapes[0]), u(*shapes[1])])


def test_linear_leaky_relu_double_backward():
    gradgradcheck(lambda x, w, b: F.linear(F.leaky_relu(F.linear(x, w), 0.2), w.T, b),
                  [u(2, 3), u(4, 3), u(3)])


CONVS = {   # (x, w) shapes and keywords: the critics' 3x3 / 4x4-stride-2 / 5x5-stride-2 convs
    "3x3_pad1": ((2, 2, 5, 5), (3, 2, 3, 3), dict(padding=1)),
    "4x4_stride2_pad1": ((1, 2, 6, 6), (3, 2, 4, 4), dict(stride=2, padding=1)),
    "5x5_stride2_pad2_odd": ((1, 1, 7, 7), (2, 1, 5, 5), dict(stride=2, padding=2)),
    "1x1": ((2, 3, 3, 3), (2, 3, 1, 1), {}),
    "asymmetric_dilated": ((1, 2, 6, 7), (2, 2, 2, 3),
                           dict(stride=(1, 2), padding=(1, 0, 2, 1), dilation=(2, 1))),
    "groups2": ((1, 4, 5, 5), (4, 2, 3, 3), dict(padding=1, groups=2)),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv2d_double_backward(name):
    xs, ws, kw = CONVS[name]
    # a nonlinearity after the convolution, so the second derivative through x is not 0
    gradgradcheck(lambda x, w, b: F.conv2d(x, w, b, **kw) ** 2, [u(*xs), u(*ws), u(ws[0])])


def test_conv_transpose2d_double_backward():
    gradgradcheck(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1,
                                                     output_padding=1) ** 2,
                  [u(1, 2, 3, 3), u(2, 3, 3, 3), u(3)])


def test_pooling_double_backward():
    gradgradcheck(lambda x: F.avg_pool2d(x * x, 2) ** 2, [u(1, 2, 4, 4)])
    gradgradcheck(lambda x: F.avg_pool2d(x * x, 3, 2, 1, count_include_pad=False) ** 2,
                  [u(1, 1, 5, 5)])
    gradgradcheck(lambda x: F.adaptive_avg_pool2d(x * x, 2) ** 2, [u(1, 2, 5, 5)])


def _cnn_critic(x, w1, w2, wl, bl):
    """WGANDiscriminator32's pattern, tiny: conv3x3-lrelu-conv4x4/2-lrelu-flatten-linear."""
    h = F.leaky_relu(F.conv2d(x, w1, padding=1), 0.1)
    h = F.leaky_relu(F.conv2d(h, w2, stride=2, padding=1), 0.1)
    return F.linear(F.flatten(h, 1), wl, bl)


def _resnet_critic(x, w1, w2, ws, wl):
    """ResNetDiscriminator32's pattern, tiny: a pooled residual block, the layer-normed ReLU
    of zoo.gan's SampleNorm, a global sum and a linear score."""
    h = F.avg_pool2d(F.conv2d(F.relu(F.conv2d(x, w1, padding=1)), w2, padding=1), 2)
    h = h + F.conv2d(F.avg_pool2d(x, 2), ws)
    flat = h.reshape(h.shape[0], -1)
    centred = flat - flat.mean(axis=1, keepdims=True)
    std = F.sqrt((centred * centred).mean(axis=1, keepdims=True))
    h = F.relu((centred / F.maximum(std, 1e-6)).reshape(*h.shape))
    return F.linear(h.sum(axis=(2, 3)), wl)


def test_critics_double_backward():
    gradgradcheck(_cnn_critic, [u(2, 1, 4, 4), u(2, 1, 3, 3), u(2, 2, 4, 4), u(1, 8), u(1)])
    gradgradcheck(_resnet_critic, [u(2, 1, 4, 4), u(2, 1, 3, 3), u(2, 2, 3, 3), u(2, 1, 1, 1),
                                   u(1, 2)])


# ---------------------------------------------------------------- autograd.grad itself

def test_grad_equals_backward_and_leaves_grad_alone():
    x = ty.tensor(u(2, 3), requires_grad=True)
    w = ty.tensor(u(3, 2), requires_grad=True)
    y = F.tanh(x @ w)
    gx, gw = ty.autograd.grad(y.sum(), [x, w], retain_graph=True)
    assert x.grad is None and w.grad is None and not gx.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(gx.numpy(), x.grad.numpy())
    np.testing.assert_array_equal(gw.numpy(), w.grad.numpy())


def test_grad_outputs_intermediate_inputs_and_several_outputs():
    x = ty.tensor(u(2, 3), requires_grad=True)
    h = x * 3.0
    y, z = h * h, h.sum()
    weights = u(2, 3)
    (gh,) = ty.autograd.grad([y, z], h, [ty.tensor(weights), None])
    np.testing.assert_allclose(gh.numpy(), 2 * h.numpy() * weights + 1, rtol=1e-6)
    with pytest.raises(RuntimeError, match="single-element output"):
        ty.autograd.grad(y, x)
    with pytest.raises(ValueError, match="grad_outputs\\[0\\] has shape"):
        ty.autograd.grad(y, x, ty.ones(3))


def test_unused_inputs_and_inputs_without_grad():
    x, unused = ty.tensor(u(3), requires_grad=True), ty.tensor(u(3), requires_grad=True)
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match="input 1 .* not used.*allow_unused"):
        ty.autograd.grad(y, [x, unused], retain_graph=True)
    gx, none = ty.autograd.grad(y, [x, unused], allow_unused=True)
    assert none is None and gx.shape == (3,)
    with pytest.raises(RuntimeError, match="does not require grad"):
        ty.autograd.grad((x * 2).sum(), ty.tensor(u(3)))


def test_graph_freed_unless_retained():
    x = ty.tensor(u(3), requires_grad=True)
    y = (F.exp(x) * x).sum()
    ty.autograd.grad(y, x)
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        ty.autograd.grad(y, x)
    z = (F.exp(x) * x).sum()
    (g,) = ty.autograd.grad(z, x, create_graph=True)      # retain_graph defaults to True
    g.sum().backward()                                     # the penalty's backward
    np.testing.assert_allclose(x.grad.numpy(), np.exp(x.numpy()) * (x.numpy() + 2), rtol=1e-6)


def test_op_without_double_backward_names_itself():
    x = ty.tensor(u(1, 1, 4, 4), requires_grad=True)
    y = F.max_pool2d(x * x, 2).sum()
    (plain,) = ty.autograd.grad(y, x, retain_graph=True)   # first order: fine
    assert plain.shape == x.shape
    with pytest.raises(RuntimeError, match="'MaxPool2d' has no graph-building backward"):
        ty.autograd.grad(y, x, create_graph=True)


def test_only_paths_to_the_inputs_are_walked():
    # the weight comes through a max pool (no double backward); the gradient with respect to
    # x does not go through it, so create_graph works
    x = ty.tensor(u(1, 1, 4, 4), requires_grad=True)
    w = F.max_pool2d(ty.tensor(u(1, 1, 6, 6), requires_grad=True), 2)
    (gx,) = ty.autograd.grad((F.conv2d(x, w, padding=1) ** 2).sum(), x, create_graph=True)
    assert gx.requires_grad
