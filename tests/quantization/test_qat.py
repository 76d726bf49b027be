"""The QAT flow on a small trained net: BN folding, QAT eval vs int8 (predictions and
layer by layer), calibration, disable_quantize, LSQ and int8-symmetric configs."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn
from tianyuan import quantization as Q
from tianyuan.quantization.observer import QParams
from tianyuan.quantization.qarray import dequantize_tensor

from qnets import (TinyNet, assert_layers_equal_qat, predict, record_int8_layers, shapes_data,
                   train, unmarked)


@pytest.fixture(scope="module")
def data():
    return shapes_data(1500, seed=0), shapes_data(600, seed=1)


@pytest.fixture(scope="module")
def trained(data):
    (x, y), _ = data
    ty.manual_seed(0)
    float_model = train(TinyNet(), x, y, steps=300)
    qat = Q.quantize_qat(float_model, Q.ema_fakequant_qconfig)
    train(qat, x, y, steps=40, lr=0.01, seed=1)
    return float_model, qat.eval(), Q.quantize(qat)


def conv_bn(training):
    ty.manual_seed(3)
    conv, bn = nn.Conv2d(4, 6, 3, padding=1, bias=True), nn.BatchNorm2d(6)
    bn.running_mean.data[:] = np.linspace(-1, 1, 6)
    bn.running_var.data[:] = np.linspace(0.5, 2, 6)
    bn.weight.data[:] = np.linspace(0.5, 1.5, 6)
    bn.bias.data[:] = np.linspace(-0.2, 0.2, 6)
    float_model = nn.Sequential(conv, bn).train(training)
    qat = nn.qat.ConvBn2d.from_float(nn.ConvBn2d(*[__import__("copy").deepcopy(m)
                                                   for m in (conv, bn)]),
                                     Q.ema_fakequant_qconfig).train(training)
    return float_model, Q.disable_fake_quant(qat)


@pytest.mark.parametrize("training", [False, True])
def test_conv_bn_folding_matches_conv_then_bn(training):
    float_model, qat = conv_bn(training)
    x = ty.randn(5, 4, 7, 7)
    np.testing.assert_allclose(qat(x).numpy(), float_model(x).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(qat.bn.running_mean.numpy(), float_model[1].running_mean.numpy(),
                               rtol=1e-6)


def conv_bn_step(kind, fused, fake_quant, ste=True, bias=False):
    """One training forward and backward of a QAT `kind` (ConvBn2d, ConvBnReLU62d) whose BN
    has a negative gamma and a large eps (the fused form's gradient to gamma through f runs
    through eps): (output, gradients of x, W, gamma, beta, running stats, the activation
    observer's range, the output's qparams). fused: the conv output / f in the batch norm's
    passes; else the separate division (a no-op hook on the BN keeps the module on that path).
    ste: the activation's fake quantization in the batch norm's node where it can; else its
    own (a no-op hook on the fake quantizer). bias: a conv bias (the division and the bias
    add before the batch norm)."""
    ty.manual_seed(5)
    conv, bn = nn.Conv2d(5, 7, 3, padding=1, bias=bias), nn.BatchNorm2d(7, eps=0.5)
    bn.running_var.data[:] = np.linspace(0.3, 3, 7)
    bn.weight.data[:] = np.linspace(-1.5, 1.2, 7)
    bn.bias.data[:] = np.linspace(-0.2, 0.4, 7)
    fused_float = {nn.qat.ConvBn2d: nn.ConvBn2d, nn.qat.ConvBnReLU62d: nn.ConvBnReLU62d}[kind]
    parts = (conv, bn) if kind is nn.qat.ConvBn2d else (conv, bn, nn.ReLU6())
    qat = kind.from_float(fused_float(*parts), Q.ema_fakequant_qconfig).train()
    if not fake_quant:
        Q.disable_fake_quant(qat)
    if not fused:
        qat.bn.register_forward_hook(lambda *args: None)
    if not ste:
        qat.act_fake_quant.register_forward_hook(lambda *args: None)
    x = ty.tensor(np.random.default_rng(2).standard_normal((3, 5, 6, 6)).astype(np.float32),
                  requires_grad=True)
    y = qat(x)
    if fake_quant:  # in the batch norm's node where that has the activation's clamp
        in_bn = ste and fused and (not bias or kind is nn.qat.ConvBnReLU62d)
        assert y._ctx.name == ("FakeQuantizeSTE" if not in_bn else
                               "BatchNormTrain" if bias else "ScaledBatchNormTrain")
    (y * ty.tensor(np.linspace(-1, 1, y.numel()).reshape(y.shape).astype(np.float32))).sum() \
        .backward()
    return [y.numpy(), x.grad.numpy(), qat.weight.grad.numpy(), qat.bn.weight.grad.numpy(),
            qat.bn.bias.grad.numpy(), qat.bn.running_mean.numpy(), qat.bn.running_var.numpy(),
            qat.act_observer.min_val.numpy(), qat.act_observer.max_val.numpy(),
            np.float32(getattr(y, "qparams", QParams(0.0, 0, None, None)).scale)]


@pytest.mark.parametrize("kind", [nn.qat.ConvBn2d, nn.qat.ConvBnReLU62d])
@pytest.mark.parametrize("fake_quant", [True, False])
def test_conv_bn_training_division_in_the_batch_norm(kind, fake_quant):
    # the gradient that reaches gamma through f (the folded weights and the division, which
    # the fused form takes through the batch norm's eps) must match the separate ops'
    for a, b in zip(conv_bn_step(kind, True, fake_quant), conv_bn_step(kind, False, fake_quant)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("kind", [nn.qat.ConvBn2d, nn.qat.ConvBnReLU62d])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_bn_activation_fake_quant_in_the_batch_norm_node(kind, bias):
    # the activation's observer and STE fake quantization as the batch norm node's last step
    # (its mask in the batch norm's backward): the same bits as their own node
    qconfig = Q.ema_fakequant_qconfig  # its observer takes the range the batch norm knows
    assert Q.FakeQuantize().straight_through(qconfig.make_act_observer()).by_range
    ste = conv_bn_step(kind, True, True, bias=bias)
    alone = conv_bn_step(kind, True, True, ste=False, bias=bias)
    for a, b in zip(ste, alone):
        np.testing.assert_array_equal(a, b)
    assert ste[-1] > 0
    assert (ste[0] != conv_bn_step(kind, True, False, bias=bias)[0]).any()


class _HalfStepFakeQuantize(Q.FakeQuantize):
    """A user's fake quantizer with a forward of its own (half the observer's step)."""

    def forward(self, x, observer):
        p = observer.qparams()
        return Q.FakeQuantizeSTE.apply(x, scale=p.scale / 2, zero_point=p.zero_point,
                                       dtype=p.dtype, axis=p.axis)


def test_conv_bn_fake_quant_with_its_own_forward_keeps_its_node():
    # LSQ (its scale learns) and a subclass with its own forward are not run in the batch
    # norm's node
    Q.register_fake_quantizer("half_step_test", _HalfStepFakeQuantize, override=True)
    conv, bn = nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
    x = ty.tensor(np.random.default_rng(3).standard_normal((2, 3, 5, 5)).astype(np.float32))
    for act, node in (("lsq", "LSQFunction"), ("half_step_test", "FakeQuantizeSTE"),
                      ("ste", "ScaledBatchNormTrain")):
        qc = Q.QConfig("weight_minmax", "ema", "ste", act)
        qat = nn.qat.ConvBnReLU2d.from_float(nn.ConvBnReLU2d(conv, bn, nn.ReLU()), qc).train()
        assert qat(x)._ctx.name == node, act


def test_conv_bn_eval_is_the_folded_conv():
    _, qat = conv_bn(False)
    w, b = qat.folded()
    x = ty.randn(2, 4, 5, 5)
    ref = ty.functional.conv2d(x, w, b, 1, 1)
    np.testing.assert_allclose(qat(x).numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_int8_agrees_with_qat_eval(trained, data):
    float_model, qat, int8 = trained
    _, (xt, yt) = data
    p_float, p_qat, p_int8 = (predict(m, xt).argmax(1) for m in (float_model, qat, int8))
    # the net has learned (chance is 0.1); 300 steps land anywhere in 0.55-0.88 with the seed
    # or the host's float rounding (0.60 on an AVX2 host, 0.75 with TIANYUAN_ISA=generic), so
    # this is no accuracy claim: the claims are the agreements below
    assert (p_float == yt).mean() > 0.4
    # the QAT model in eval computes the int8 model's integers: the same logits, bit for bit
    np.testing.assert_array_equal(predict(qat, xt), predict(int8, xt))


def test_each_int8_layer_equals_its_qat_twin(trained, data):
    _, qat, int8 = trained
    _, (xt, _) = data
    seen = record_int8_layers(int8, xt[:64])
    assert_layers_equal_qat(seen, qat)
    assert {"conv1", "add_relu", "cat", "avg", "gap", "fc", "dw"} <= set(seen)


def test_qat_float_form_within_one_step_of_int8(trained, data):
    """Given inputs without their grids, a QAT layer runs its training form (fake quantization
    in float32): within one step of the int8 layer, off by one in few values (a float32 sum
    that lands on the other side of a rounding boundary)."""
    _, qat, int8 = trained
    _, (xt, _) = data
    with ty.no_grad():
        for name, (args, out) in record_int8_layers(int8, xt[:64]).items():
            if not hasattr(qat.get_submodule(name), "act_observer"):
                continue   # pooling: snapped to the int8 average by the input's grid in training too
            ref = qat.get_submodule(name)(*unmarked(args)).numpy()
            scale = getattr(out.data, "scale", None) or 1.0
            steps = np.abs(dequantize_tensor(out).numpy() - ref) / scale
            assert steps.max() <= 1 + 1e-3, f"{name}: {steps.max()} steps"
            assert (steps > 0.5).mean() < 0.01, f"{name}: {(steps > 0.5).mean()} off by a step"


def test_int8_model_state(trained):
    _, _, int8 = trained
    state = int8.state_dict()
    assert state["conv1.weight"].dtype == np.int8 and state["fc.weight"].dtype == np.int8
    assert state["conv1.weight_scale"].shape == (8,)
    assert not any(k.endswith("running_mean") for k in state)


def test_int8_state_loads_into_another_int8_model(trained, data):
    """load_state_dict repacks the weights and drops the cached requantization constants."""
    float_model, _, int8 = trained
    _, (xt, _) = data
    other = Q.quantize(Q.calibrate(Q.quantize_qat(float_model, Q.calibration_qconfig),
                                   [xt[:50]]))
    before = predict(other, xt[:64])          # fills the caches with the old constants
    other.load_state_dict(int8.state_dict())
    after, want = predict(other, xt[:64]), predict(int8, xt[:64])
    assert not np.array_equal(before, want)
    np.testing.assert_array_equal(after, want)


@pytest.mark.parametrize("layer", ["conv1", "fc"])
def test_int8_output_follows_a_replaced_scale(trained, data, layer):
    """Layers read their output scale and zero point once (QuantizedModule.output) and cache
    constants made of them (a conv's or a linear's prepared call); a buffer assigned anew is
    what the next call requantizes to and what its output carries."""
    _, _, int8 = trained
    _, (xt, _) = data
    int8 = __import__("copy").deepcopy(int8)
    seen = []
    module = getattr(int8, layer)
    module.register_forward_hook(lambda m, a, out: seen.append(out.data))
    predict(int8, xt[:8])
    old = seen[-1]
    scale, zp = old.scale, old.zero_point
    module.scale = ty.tensor(np.float32(2 * scale))
    module.zero_point = ty.tensor(np.int64(zp + 1))
    predict(int8, xt[:8])
    new = seen[-1]
    assert (new.scale, new.zero_point) == (np.float32(2 * scale), zp + 1)
    assert type(new.scale) is np.float32 and type(new.zero_point) is int
    want = (old.astype(np.int64) - zp) / 2 + zp + 1     # the same values on the new grid
    assert np.abs(new.astype(np.int64) - want).max() <= 1


def test_calibration_ptq(trained, data):
    float_model, _, _ = trained
    (x, _), (xt, yt) = data
    qat = Q.quantize_qat(float_model, Q.calibration_qconfig)
    Q.calibrate(qat, [x[i:i + 100] for i in range(0, 400, 100)])
    int8 = Q.quantize(qat)
    logits = predict(float_model, xt)
    p_float = logits.argmax(1)
    p_qat, p_int8 = predict(qat, xt).argmax(1), predict(int8, xt).argmax(1)
    assert (p_qat == p_int8).mean() >= 0.99
    # PTQ changes a float prediction where the top two logits lie within a few steps of
    # the uint8 logits (the net trained on one host: logits over +-45, step 0.35, 27 % of
    # the test set within two steps, 4 points lost there, which QAT wins back; the trained
    # net differs between hosts). Elsewhere calibration must keep the float predictions.
    top2 = np.sort(logits, 1)[:, -2:]
    firm = top2[:, 1] - top2[:, 0] > 2 * int8.fc.out_scale
    assert firm.mean() > 0.5
    assert (p_int8 != p_float)[firm].mean() <= 0.005
    assert (p_int8 == yt)[firm].mean() >= (p_float == yt)[firm].mean() - 0.005


def test_disable_quantize_keeps_classifier_float(trained, data):
    float_model, _, _ = trained
    _, (xt, _) = data
    model = __import__("copy").deepcopy(float_model)
    Q.disable_quantize(model.fc)
    qat = Q.quantize_qat(model)
    Q.calibrate(qat, [xt[:200]])
    int8 = Q.quantize(qat)
    assert type(qat.fc) is nn.Linear and type(int8.fc) is nn.Linear
    assert isinstance(int8.conv1, nn.quantized.ConvBnReLU2d)
    out, ref = predict(int8, xt[:200]), predict(qat, xt[:200])
    assert out.dtype == np.float32
    assert (out.argmax(1) == ref.argmax(1)).mean() >= 0.98
    assert np.abs(out - ref).mean() < 0.02


def test_conv_and_linear_fused_with_an_activation_alone():
    """Conv + ReLU / ReLU6 and Linear + ReLU without a batch norm (a VGG-style net): fused,
    QAT, int8, the activation a flag of the fused class; a part of the wrong kind refused."""
    ty.manual_seed(4)
    model = nn.Sequential(nn.QuantStub(), nn.Conv2d(3, 8, 3, padding=1), nn.ReLU6(),
                          nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 6),
                          nn.ReLU(), nn.DequantStub()).eval()
    qat = Q.quantize_qat(model, Q.ema_fakequant_qconfig, groups=[["1", "2"], ["3", "4"],
                                                                 ["6", "7"]])
    assert [type(m).__name__ for m in (qat[1], qat[3], qat[6])] == \
        ["ConvReLU62d", "ConvReLU2d", "LinearReLU"]
    x = ty.randn(4, 3, 6, 6)
    Q.calibrate(qat, [x])
    int8 = Q.quantize(qat)
    assert int8[1].activation == "relu6" and int8[6].activation == "relu"
    got, want = int8(x).numpy(), qat(x).numpy()
    assert np.abs(got - want).max() <= int8[6].out_scale * 1.001 and (got >= 0).all()
    with pytest.raises(TypeError, match=r"ConvReLU2d: expected fused parts \['ReLU'\].*"
                                        r"\['ReLU6'\]"):
        nn.qat.ConvReLU2d.from_float(nn.fused.ConvReLU62d(nn.Conv2d(3, 4, 1), nn.ReLU6()),
                                     Q.ema_fakequant_qconfig)


@pytest.mark.parametrize("qconfig", [Q.ema_fakequant_qconfig, Q.lsq_qconfig],
                         ids=["ema", "lsq"])
def test_a_qat_state_loads_into_a_freshly_prepared_model(trained, data, qconfig):
    """Observer ranges (None until data) and LSQ scales (empty until data) take the saved
    arrays: a QAT checkpoint had refused to load ('unexpected keys'), so a QAT training run
    could not resume."""
    float_model, _, _ = trained
    (x, y), (xt, _) = data
    qat = train(Q.quantize_qat(float_model, qconfig), x, y, steps=2, lr=1e-4)
    fresh = Q.quantize_qat(float_model, qconfig)
    assert fresh.conv1.act_observer.min_val is None
    assert fresh.load_state_dict(qat.state_dict()) == ([], [])
    np.testing.assert_array_equal(predict(fresh, xt[:64]), predict(qat, xt[:64]))
    np.testing.assert_array_equal(predict(Q.quantize(fresh), xt[:64]),
                                  predict(Q.quantize(qat), xt[:64]))


@pytest.mark.parametrize("qconfig", [Q.lsq_qconfig, Q.int8_symmetric_qconfig,
                                     Q.min_max_fakequant_qconfig, Q.reduce_range_qconfig])
def test_other_qconfigs_train_and_convert(trained, data, qconfig):
    float_model, _, _ = trained
    (x, y), (xt, _) = data
    # LSQ scales of BN-folded weights get gradients amplified by 1 / (gamma / sigma): a
    # large step can blow a channel's scale up (then its int32 bias underflows); small lr
    qat = train(Q.quantize_qat(float_model, qconfig), x, y, steps=5, lr=1e-4)
    if qconfig is Q.lsq_qconfig:
        assert qat.conv1.act_fake_quant.scale.grad is not None
    int8 = Q.quantize(qat)
    agree = (predict(qat, xt[:200]).argmax(1) == predict(int8, xt[:200]).argmax(1)).mean()
    assert agree >= 0.98
    if qconfig is Q.reduce_range_qconfig:  # 7-bit weights: narrow, with no residual
        convs = [m for m in int8.modules()
                 if isinstance(m, nn.quantized.Conv2d) and not m.packed.depthwise]
        assert convs and all(m.packed.narrow[2].size == 0 for m in convs)
