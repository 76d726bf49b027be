"""Float fused modules: in eval mode under no_grad a conv group runs as one convolution with
the frozen BN folded in (nn.fused.Fused.forward); it must compute what its parts compute."""
import numpy as np
import pytest

import tianyuan as ty
from helpers import each_isa
from tianyuan import nn, quantization, zoo
from tianyuan.functional.normalization import eval_affine_arrays
from tianyuan.nn import fused
from tianyuan.ops.norm import fold_eval_f32


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


def _fold_numpy(mean, var, weight, bias, eps, conv_bias):
    """eval_affine_arrays' numpy operations, then the conv bias moved through the BN."""
    scale = (1.0 / np.sqrt(np.asarray(var, np.float64) + eps)).astype(np.float32)
    if weight is not None:
        scale = scale * weight
    shift = -scale * mean
    if bias is not None:
        shift = shift + bias
    if conv_bias is not None:
        shift = shift + scale * conv_bias
    return scale, shift


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("with_conv_bias", [True, False])
def test_frozen_bn_fold_is_numpys_bits(affine, with_conv_bias):
    """The fold runs natively for float32 (one call instead of a dozen numpy ops): the same
    bits as numpy, over magnitudes from denormal to huge and zero, negative, infinite and NaN
    variances."""
    rng = np.random.default_rng(7)
    c = 4096
    spread = lambda: (rng.standard_normal(c) * 10.0 ** rng.integers(-40, 38, c)).astype(
        np.float32)
    var = np.abs(spread())
    var[:8] = [0, -1e-30, -1, 1e-45, 1.0000001, np.inf, np.nan, 3.0]
    args = [spread(), var, spread() if affine else None, spread() if affine else None]
    conv_bias = spread() if with_conv_bias else None
    for eps in (1e-5, 1e-3, 0.0):
        with np.errstate(all="ignore"):
            want = _fold_numpy(*args, eps, conv_bias)
            got = eval_affine_arrays(np.float32, *args, eps, conv_bias)
        assert fold_eval_f32(*args, eps, conv_bias) is not None       # the native path ran
        for g, w in zip(got, want):
            assert g.dtype == np.float32
            nan = np.isnan(w)                     # a NaN's sign and payload carry nothing
            np.testing.assert_array_equal(np.isnan(g), nan)
            np.testing.assert_array_equal(g[~nan].view(np.uint32), w[~nan].view(np.uint32))
    # a float64 variance (not all float32): numpy's own path, which reads it as it is
    var64 = var.astype(np.float64) * (1 + 1e-12)
    with np.errstate(all="ignore"):
        want = _fold_numpy(args[0], var64, *args[2:], 1e-5, conv_bias)
        got = eval_affine_arrays(np.float32, args[0], var64, *args[2:], 1e-5, conv_bias)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_fused_conv_checks_each_new_input_shape():
    """The eval path keeps the checked geometry per input shape: a later input of another
    shape is checked again (and a wrong one named), not run on the old plan."""
    module = fused.ConvBnReLU2d(nn.Conv2d(4, 6, 3, padding=1), nn.BatchNorm2d(6),
                                nn.ReLU()).eval()
    with ty.no_grad():
        assert module(ty.randn(1, 4, 5, 5)).shape == (1, 6, 5, 5)
        assert module(ty.randn(2, 4, 7, 3)).shape == (2, 6, 7, 3)
        with pytest.raises(ValueError, match="conv2d_affine_act: input has 3 channels"):
            module(ty.randn(2, 3, 7, 3))
        module[0].padding = (0, 0)                   # new geometry: a new plan
        assert module(ty.randn(2, 4, 7, 3)).shape == (2, 6, 5, 1)
