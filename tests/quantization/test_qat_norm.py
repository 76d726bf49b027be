"""A batch norm alone (nn.qat / nn.quantized BatchNorm2d and BnReLU2d, the generators' BN-ReLU
with no conv before it): eval QAT is the float BN, training updates the statistics and
trains gamma and beta, and the int8 layer (a depthwise 1x1 conv) is within one quantization
step of its QAT twin."""
import numpy as np
import pytest
from qnets import assert_layers_equal_qat, record_int8_layers

import tianyuan as ty
from tianyuan import nn
from tianyuan import quantization as Q


class NormNet(nn.Module):
    """QuantStub, BN-ReLU, ConvTranspose2d, BN alone, DequantStub."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        self.bn1, self.relu1 = nn.BatchNorm2d(5), nn.ReLU()
        self.up = nn.ConvTranspose2d(5, 4, 4, 2, 1)
        self.bn2 = nn.BatchNorm2d(4)

    def fuse_groups(self):
        return [["bn1", "relu1"]]

    def forward(self, x):
        return self.dequant(self.bn2(self.up(self.relu1(self.bn1(self.quant(x))))))


def _statistics(net, rng):
    for bn in (net.bn1, net.bn2):
        c = bn.num_features
        bn.running_mean.data[:] = rng.normal(0, 0.5, c)
        bn.running_var.data[:] = rng.uniform(0.3, 3.0, c)
        bn.weight.data[:] = rng.uniform(-1.5, 1.5, c)      # negative gamma: a negative weight
        bn.bias.data[:] = rng.normal(0, 0.3, c)
    return net


@pytest.fixture(scope="module")
def nets():
    rng = np.random.default_rng(0)
    ty.manual_seed(0)
    net = _statistics(NormNet(), rng).eval()
    qat = Q.calibrate(Q.quantize_qat(net),
                      [rng.normal(0, 1, (4, 5, 4, 4)).astype(np.float32) for _ in range(2)])
    return net, qat, Q.quantize(qat), rng.normal(0, 1, (3, 5, 4, 4)).astype(np.float32)


def test_qat_eval_without_fake_quant_is_the_float_bn(nets):
    net, qat, _, x = nets
    assert type(qat.bn1).__name__ == "BnReLU2d" and type(qat.bn2).__name__ == "BatchNorm2d"
    Q.disable_fake_quant(qat)
    try:
        with ty.no_grad():
            np.testing.assert_allclose(qat(ty.tensor(x)).numpy(), net(ty.tensor(x)).numpy(),
                                       rtol=1e-5, atol=1e-5)
    finally:
        Q.enable_fake_quant(qat)


def test_qat_training_uses_batch_statistics():
    rng = np.random.default_rng(1)
    qat = Q.quantize_qat(_statistics(NormNet(), rng).train())
    before = qat.bn2.running_mean.numpy().copy()
    out = qat(ty.tensor(rng.normal(0, 1, (2, 5, 3, 3)).astype(np.float32)))
    (out * out).mean().backward()
    assert not np.array_equal(before, qat.bn2.running_mean.numpy())
    for p in (qat.bn1.weight, qat.bn2.bias):
        assert p.grad is not None and np.abs(p.grad.numpy()).sum() > 0


def test_int8_bn_equals_its_qat_twin(nets):
    _, qat, int8, x = nets
    assert isinstance(int8.bn1, nn.quantized.BnReLU2d) and int8.bn2.groups == 4
    seen = record_int8_layers(int8, x, {"bn1", "up", "bn2"})
    assert_layers_equal_qat(seen, qat)
    assert set(seen) == {"bn1", "up", "bn2"}
    assert np.abs(int8.bn2.weight.numpy()).min() == 127      # one weight a channel: +-127


def test_bn_without_running_statistics_is_refused():
    qat = Q.quantize_qat(nn.Sequential(nn.QuantStub(),
                                       nn.BatchNorm2d(3, track_running_stats=False)))
    with pytest.raises(ValueError, match="BatchNorm2d: quantizing needs running statistics"):
        qat[1].folded()
