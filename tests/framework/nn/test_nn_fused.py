"""Float fused modules: in eval mode under no_grad a conv group runs as one convolution with
the frozen BN folded in (nn.fused.Fused.forward); it must compute what its parts compute."""
import numpy as np
import pytest

import tianyuan as ty
from helpers import each_isa
from tianyuan import nn, quantization, zoo
from tianyuan.nn import fused


def _randomise_bn(bn, rng):
    bn.running_mean.data[...] = rng.standard_normal(bn.num_features)
    bn.running_var.data[...] = rng.random(bn.num_features) + 0.5
    if bn.weight is not None:
        bn.weight.data[...] = rng.standard_normal(bn.num_features)
        bn.bias.data[...] = rng.standard_normal(bn.num_features)


CASES = [  # (fused class, conv kwargs, BN affine)
    (fused.ConvBnReLU2d, dict(in_channels=3, out_channels=13, kernel_size=3, padding=1), True),
    (fused.ConvBnReLU62d, dict(in_channels=16, out_channels=24, kernel_size=3, stride=2,
                               padding=1), True),
    (fused.ConvBn2d, dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, groups=8),
     True),
    (fused.ConvBn2d, dict(in_channels=5, out_channels=7, kernel_size=1, bias=True), False),
    (fused.ConvReLU2d, dict(in_channels=4, out_channels=6, kernel_size=3, padding="same",
                            bias=True), None),
    (fused.ConvBnReLU2d, dict(in_channels=32, out_channels=32, kernel_size=3, padding=1), True),
    # deep kernel on a small map: the BN scale multiplies the output, not the weights
    (fused.ConvBnReLU2d, dict(in_channels=64, out_channels=16, kernel_size=3, padding=1,
                              size=3), True),
]


@pytest.mark.parametrize("cls,conv_kwargs,affine", CASES)
def test_eval_fused_conv_matches_its_parts_on_every_isa(cls, conv_kwargs, affine):
    rng = np.random.default_rng(0)
    ty.manual_seed(0)
    conv_kwargs = dict(conv_kwargs)
    size = conv_kwargs.pop("size", 30)
    parts = [nn.Conv2d(**conv_kwargs)]
    if "BatchNorm2d" in cls.parts:
        parts.append(nn.BatchNorm2d(conv_kwargs["out_channels"], affine=affine))
        _randomise_bn(parts[-1], rng)
    if cls.parts[-1] in ("ReLU", "ReLU6"):
        parts.append(getattr(nn, cls.parts[-1])())
    module = cls(*parts).eval()
    x = ty.tensor(rng.standard_normal((2, conv_kwargs["in_channels"], size, size))
                  .astype(np.float32) * 3)
    want = x
    for part in parts:
        want = part(want)
    for isa in each_isa():
        with ty.no_grad():
            got = module(x)
        scale = max(1.0, float(np.abs(want.numpy()).max()))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4 * scale,
                                   err_msg=f"{cls.__name__}, {isa}")


def test_fused_conv_keeps_autograd_and_batch_statistics():
    ty.manual_seed(0)
    module = fused.ConvBnReLU2d(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    x = ty.randn(2, 3, 6, 6, requires_grad=True)
    module.eval()(x).sum().backward()          # eval with grad: the parts, differentiable
    assert x.grad is not None
    module[1].running_mean = None               # no running stats: BN uses the batch
    module[1].running_var = None
    with ty.no_grad():
        got = module(x)
    assert got.shape == (2, 4, 4, 4)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "shufflenet_v2_x0_5"])
def test_fused_zoo_model_predicts_what_the_float_model_does(name):
    ty.manual_seed(0)
    model = zoo.get_model(name, num_classes=10).eval()
    rng = np.random.default_rng(1)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            _randomise_bn(module, rng)
    x = ty.tensor(rng.standard_normal((2, 3, 64, 64)).astype(np.float32))
    with ty.no_grad():
        want = model(x).numpy()
        fused_model = quantization.fuse(model, model.fuse_groups())
        assert not any(m.training for m in fused_model.modules())   # takes the one-kernel path
        got = fused_model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
