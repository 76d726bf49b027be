"""FrozenBatchNorm2d: BatchNorm2d's names less num_batches_tracked, a fixed affine in training
too, convert_frozen_batchnorm, and conv + frozen BN through fuse, QAT, int8 and jit.trace."""
import numpy as np
import pytest
from helpers import gradcheck

import tianyuan as ty
from tianyuan import jit, nn
from tianyuan import quantization as Q


def _trained_bn(channels=6, seed=0):
    """A BatchNorm2d with non-trivial statistics and affine."""
    rng = np.random.default_rng(seed)
    bn = nn.BatchNorm2d(channels)
    bn.load_state_dict({"weight": rng.uniform(0.5, 1.5, channels).astype(np.float32),
                        "bias": rng.standard_normal(channels).astype(np.float32),
                        "running_mean": rng.standard_normal(channels).astype(np.float32),
                        "running_var": rng.uniform(0.5, 2.0, channels).astype(np.float32),
                        "num_batches_tracked": np.asarray(7, np.int64)})
    return bn


def _net(seed=0):
    """quant -> conv -> BN -> ReLU -> conv -> BN -> dequant, with fuse groups, as the zoo
    writes them."""
    ty.manual_seed(seed)
    net = nn.Sequential(nn.QuantStub(), nn.Conv2d(3, 6, 3, padding=1, bias=False),
                        _trained_bn(6, seed), nn.ReLU(),
                        nn.Conv2d(6, 8, 3, stride=2, bias=False), _trained_bn(8, seed + 1),
                        nn.DequantStub())
    net.fuse_groups = lambda: [["1", "2", "3"], ["4", "5"]]
    return net


def _x(shape=(4, 3, 10, 10), seed=0):
    return ty.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_state_is_batchnorms_less_num_batches_tracked_and_all_buffers():
    bn = nn.FrozenBatchNorm2d(5)
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var"]
    assert list(bn.parameters()) == [] and len(list(bn.buffers())) == 4
    # a BatchNorm2d's state (with num_batches_tracked) loads strictly, the counter dropped
    trained = _trained_bn(5)
    keys = bn.load_state_dict(trained.state_dict(), strict=True)
    assert keys.unexpected_keys == []
    for name, value in bn.state_dict().items():
        np.testing.assert_array_equal(value, trained.state_dict()[name])
    with pytest.raises(RuntimeError, match="unexpected key.*num_batches_tracked_typo"):
        bn.load_state_dict({**trained.state_dict(), "num_batches_tracked_typo": 1})


def test_forward_is_the_fixed_affine_in_training_too():
    bn = nn.FrozenBatchNorm2d.from_batchnorm(_trained_bn(6)).train()
    x = _x((2, 6, 5, 5))
    s = {k: v.reshape(1, -1, 1, 1) for k, v in bn.state_dict().items()}
    want = (x.numpy() - s["running_mean"]) / np.sqrt(s["running_var"] + bn.eps) * s["weight"]
    np.testing.assert_allclose(bn(x).numpy(), want + s["bias"], rtol=1e-5, atol=1e-5)
    before = bn.state_dict()
    bn(x)
    assert all(np.array_equal(before[k], v) for k, v in bn.state_dict().items())
    with pytest.raises(ValueError, match=r"expected \(N, 6, H, W\)"):
        bn(_x((2, 5, 3, 3)))


def test_gradient_reaches_the_input_only():
    bn = nn.FrozenBatchNorm2d.from_batchnorm(_trained_bn(3)).astype(np.float64)
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 4))
    gradcheck(lambda t: bn(t), [x])
    assert all(not b.requires_grad for b in bn.buffers())


def test_convert_frozen_batchnorm_keeps_the_eval_function():
    net = _net().eval()
    x = _x()
    with ty.no_grad():
        want = net(x).numpy()
    frozen = nn.convert_frozen_batchnorm(net)
    assert frozen is net and isinstance(net[2], nn.FrozenBatchNorm2d)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    assert list(net.state_dict()) == [k for k in _net().state_dict()
                                      if not k.endswith("num_batches_tracked")]
    with ty.no_grad():
        np.testing.assert_array_equal(net.train()(x).numpy(), want)   # training: the same
    assert isinstance(nn.convert_frozen_batchnorm(nn.BatchNorm2d(4)), nn.FrozenBatchNorm2d)
    with pytest.raises(ValueError, match="track_running_stats=False"):
        nn.convert_frozen_batchnorm(nn.BatchNorm2d(4, track_running_stats=False))


def test_conv_frozen_bn_fuses_and_quantizes():
    net = nn.convert_frozen_batchnorm(_net())
    qat = Q.quantize_qat(net)
    assert type(qat[1]).__name__ == "ConvBnReLU2d" and type(qat[4]).__name__ == "ConvBn2d"
    assert isinstance(qat[1], nn.qat.QATModule)
    x = _x()
    stats = {k: v for k, v in qat.state_dict().items() if ".bn." in k}
    out = qat.train()(x)          # QAT training folds with the fixed statistics
    out.sum().backward()
    assert qat[1].weight.grad is not None
    with ty.no_grad():   # eval computes the int8 integers, training the float form: a step
        step = float(np.max(qat[4].act_qparams().scale))
        off = np.abs(out.numpy() - qat.eval()(x).numpy())
        assert off.max() <= step * 1.001 and (off > 1e-6).mean() < 0.02
    assert len(stats) == 8 and all(np.array_equal(qat.state_dict()[k], v)
                                   for k, v in stats.items())
    Q.calibrate(qat, [x.numpy()])
    int8 = Q.quantize(qat)
    with ty.no_grad():
        np.testing.assert_array_equal(int8(x).numpy(), qat(x).numpy())


def test_float_fuse_and_jit_fold_a_frozen_bn():
    net = nn.convert_frozen_batchnorm(_net()).eval()
    x = _x()
    with ty.no_grad():
        want = net(x).numpy()
        fused = Q.fuse(nn.convert_frozen_batchnorm(_net()).eval(), net.fuse_groups())
        np.testing.assert_allclose(fused(x).numpy(), want, rtol=1e-5, atol=1e-5)
    graph = jit.trace(net, x, fuse=True)
    assert len(graph.steps) == 2          # two folded convolutions, the ReLU in the first
    np.testing.assert_allclose(graph(x).numpy(), want, rtol=1e-5, atol=1e-5)
