"""QAT and int8 ConvTranspose2d (nn.qat / nn.quantized, plain, ReLU, BN-folded): weights
fake-quantized per output channel in the transposed layout, BN folding, conversion by name,
and the int8 layers within one quantization step of their QAT twins (as test_qat.py checks
the convs). The kernel: test_quant_deconv.py; the int8 generator: test_quant_gan.py."""
import numpy as np
import pytest
from qnets import assert_layers_equal_qat, record_int8_layers, unmarked

import tianyuan as ty
from tianyuan import nn
from tianyuan import quantization as Q
from tianyuan.nn.qat.deconv import conv_layout, deconv_layout
from tianyuan.quantization.qarray import dequantize_tensor


class UpNet(nn.Module):
    """QuantStub, ConvTranspose-BN-ReLU (stride 2), a grouped ConvTranspose2d with
    output_padding and dilation, a ConvTranspose-ReLU, DequantStub."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        self.up1, self.bn1, self.relu1 = (nn.ConvTranspose2d(6, 8, 4, 2, 1, bias=False),
                                          nn.BatchNorm2d(8), nn.ReLU())
        self.up2 = nn.ConvTranspose2d(8, 6, 3, 2, 1, output_padding=1, groups=2, dilation=1)
        self.up3, self.relu3 = nn.ConvTranspose2d(6, 3, 3, 1, 2, dilation=2), nn.ReLU()

    def fuse_groups(self):
        return [["up1", "bn1", "relu1"], ["up3", "relu3"]]

    def forward(self, x):
        x = self.relu1(self.bn1(self.up1(self.quant(x))))
        return self.dequant(self.relu3(self.up3(self.up2(x))))


def _trained_bn(net, rng):
    bn = net.bn1
    bn.running_mean.data[:] = rng.normal(0, 0.3, 8)
    bn.running_var.data[:] = rng.uniform(0.5, 2.0, 8)
    bn.weight.data[:] = rng.uniform(0.5, 1.5, 8)
    bn.bias.data[:] = rng.normal(0, 0.2, 8)
    return net


@pytest.fixture(scope="module")
def nets():
    rng = np.random.default_rng(0)
    ty.manual_seed(0)
    net = _trained_bn(UpNet(), rng).eval()
    batches = [rng.normal(0, 1, (4, 6, 5, 4)).astype(np.float32) for _ in range(3)]
    qat = Q.calibrate(Q.quantize_qat(net), batches)
    return net, qat, rng.normal(0, 1, (3, 6, 5, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def int8(nets):
    return Q.quantize(nets[1])


@pytest.mark.parametrize("groups", [1, 2, 3])
def test_layouts_are_inverse_permutations(groups):
    w = np.arange(6 * 4 * 2 * 3, dtype=np.float32).reshape(6, 4, 2, 3)
    conv = conv_layout(w, groups)
    assert conv.shape == (4 * groups, 6 // groups, 2, 3)
    # output channel g * 4 + o reads rows g * (6 / groups) ... of column o
    cg = 6 // groups
    np.testing.assert_array_equal(conv[(groups - 1) * 4 + 1], w[(groups - 1) * cg:, 1])
    np.testing.assert_array_equal(deconv_layout(conv, groups), w)
    t = conv_layout(ty.tensor(w, requires_grad=True), groups)
    np.testing.assert_array_equal(t.numpy(), conv)


def test_qat_observes_weights_per_output_channel(nets):
    _, qat, _ = nets
    up2 = qat.up2                        # (8, 3, 3, 3) in 2 groups: OC = 6
    w = up2.weight.numpy()
    scale = up2.weight_qparams().scale
    want = np.abs(conv_layout(w, 2)).reshape(6, -1).max(1) / 127
    np.testing.assert_allclose(scale, want, rtol=1e-6)


def test_qat_without_fake_quant_is_the_float_net(nets):
    net, qat, x = nets
    Q.disable_fake_quant(qat)
    try:
        with ty.no_grad():
            np.testing.assert_allclose(qat(ty.tensor(x)).numpy(), net(ty.tensor(x)).numpy(),
                                       rtol=1e-4, atol=1e-5)
    finally:
        Q.enable_fake_quant(qat)
    assert type(qat.up1).__name__ == "ConvTransposeBnReLU2d"
    assert type(qat.up3).__name__ == "ConvTransposeReLU2d"


def test_qat_bn_training_step_has_gradients():
    rng = np.random.default_rng(1)
    qat = Q.quantize_qat(_trained_bn(UpNet(), rng).train())
    out = qat(ty.tensor(rng.normal(0, 1, (2, 6, 3, 3)).astype(np.float32)))
    (out * out).mean().backward()
    params = dict(qat.named_parameters())
    for name in ("up1.weight", "up1.bn.weight", "up2.weight", "up3.bias"):
        grad = params[name].grad
        assert grad is not None and np.abs(grad.numpy()).sum() > 0, name


def test_int8_layers_equal_their_qat_twins(nets, int8):
    """Bit for bit in eval (nn/qat/module.py); the float form (training's) within a step."""
    _, qat, x = nets
    seen = record_int8_layers(int8, x, {"up1", "up2", "up3"})
    assert_layers_equal_qat(seen, qat)
    assert set(seen) == {"up1", "up2", "up3"}
    assert type(int8.up1).__name__ == "ConvTransposeBnReLU2d"
    with ty.no_grad():
        for name, (args, out) in seen.items():
            ref = qat.get_submodule(name)(*unmarked(args)).numpy()
            steps = np.abs(dequantize_tensor(out).numpy() - ref) / out.data.scale
            assert steps.max() <= 1 + 1e-3, f"{name}: {steps.max()} steps"


def test_int8_state_round_trip(nets, int8):
    x = nets[2]
    state = int8.state_dict()
    assert state["up2.weight"].shape == (8, 3, 3, 3) and state["up2.weight"].dtype == np.int8
    assert state["up2.weight_scale"].shape == (6,)
    rng = np.random.default_rng(3)
    other = Q.quantize(Q.calibrate(Q.quantize_qat(_trained_bn(UpNet(), rng).eval()),
                                   [rng.normal(0, 1, (2, 6, 5, 4)).astype(np.float32)]))
    with ty.no_grad():
        before = other(ty.tensor(x)).numpy()
        other.load_state_dict(state)
        after, want = other(ty.tensor(x)).numpy(), int8(ty.tensor(x)).numpy()
    assert not np.array_equal(before, want)
    np.testing.assert_array_equal(after, want)


def test_int8_deconv_needs_a_quantized_input(nets, int8):
    with pytest.raises(TypeError, match="ConvTransposeBnReLU2d: expected a quantized tensor"):
        int8.up1(ty.tensor(nets[2]))


@pytest.mark.parametrize("qconfig", ["min_max_fakequant_qconfig", "lsq_qconfig",
                                     "int8_symmetric_qconfig", "reduce_range_qconfig"])
def test_other_qconfigs_train_and_convert(qconfig):
    """Three QAT steps with each preset (LSQ's learnt scales, int8 activations, 7-bit weights),
    then every int8 transposed conv equal to its QAT twin."""
    rng = np.random.default_rng(4)
    qat = Q.quantize_qat(_trained_bn(UpNet(), rng).train(), getattr(Q, qconfig))
    for _ in range(3):
        out = qat(ty.tensor(rng.normal(0, 1, (4, 6, 5, 4)).astype(np.float32)))
        (out * out).mean().backward()
    int8 = Q.quantize(qat.eval())
    seen = record_int8_layers(int8, rng.normal(0, 1, (3, 6, 5, 4)).astype(np.float32),
                              {"up1", "up2", "up3"})
    assert_layers_equal_qat(seen, qat)
    assert len(seen) == 3
