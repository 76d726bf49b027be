"""Eval-mode QAT computes the int8 twin's integers (nn/qat/module.py): the conv sums on the
float32 GEMM where exact, else the reference; the grid mark kept through the ops that only
move values; gradients in eval still flow; calibration and training keep the float form."""
import numpy as np

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn
from tianyuan import quantization as Q
from tianyuan.nn.qat.conv import exact_chunks
from tianyuan.quantization import reference as R


def test_sums_equal_the_reference_in_one_chunk_or_several():
    """A conv of 8 channels sums in one float32 chunk; one of 64 channels at +-127 weights and
    inputs up to 255 (576 * 127 * 255 >= 2**24) in two or more: both the exact integers; a
    depthwise conv on its own kernel, likewise."""
    rng = np.random.default_rng(0)
    for channels, pieces in ((8, 1), (64, 2)):
        conv = Q.quantize_qat(nn.Sequential(nn.QuantStub(), nn.Conv2d(channels, 6, 3,
                                                                      padding=1)))[1].eval()
        qx = rng.integers(0, 256, (2, channels, 7, 5)).astype(np.uint8)
        qx[0, :, 0, 0] = 255
        qw = rng.choice(np.array([-127, 127], np.int8), (6, channels, 3, 3))
        chunks = exact_chunks(qx, 0, qw)[2]
        assert len(chunks) >= pieces and chunks[0][0] == 0 and chunks[-1][1] == channels
        np.testing.assert_array_equal(conv.int8_sums(qx, 3, qw), R.conv2d(qx, 3, qw, 1, 1))
    dw = Q.quantize_qat(nn.Sequential(nn.QuantStub(), nn.Conv2d(5, 5, 3, 2, 1, groups=5)))[1]
    qx = rng.integers(0, 256, (2, 5, 9, 8)).astype(np.uint8)
    qw = rng.integers(-127, 128, (5, 1, 3, 3)).astype(np.int8)
    np.testing.assert_array_equal(dw.eval().int8_sums(qx, 7, qw),
                                  R.conv2d(qx, 7, qw, 2, 1, groups=5))


def test_transposed_conv_sums_equal_the_reference():
    rng = np.random.default_rng(2)
    for channels in (6, 64):      # one chunk; several (64 * 16 taps * 127 * 255 >= 2**24)
        up = Q.quantize_qat(nn.Sequential(nn.QuantStub(), nn.ConvTranspose2d(
            channels, 5, 4, 2, 1, output_padding=1)))[1].eval()
        qx = rng.integers(0, 256, (2, channels, 5, 4)).astype(np.uint8)
        qw = rng.choice(np.array([-127, 127], np.int8), (5, channels, 4, 4))   # conv layout
        want = R.conv_transpose2d(qx, 9, np.ascontiguousarray(qw.transpose(1, 0, 2, 3)), 2, 1,
                                  1)
        np.testing.assert_array_equal(up.int8_sums(qx, 9, qw), want)


def test_grid_mark_survives_reshape_permute_and_max_pool():
    x = ty.randn(2, 4, 6, 6)
    p = Q.QParams(np.float32(0.1), 3, np.dtype(np.uint8), None)
    x.qparams = p
    for y in (F.reshape(x, (2, 4, 36)), F.permute(x, 0, 2, 3, 1), x.view(2, -1),
              F.max_pool2d(x, 2)):
        assert y.qparams is p
    assert getattr(x + 1, "qparams", None) is None        # arithmetic leaves the grid


def _small_net():
    ty.manual_seed(0)
    rng = np.random.default_rng(1)
    net = nn.Sequential(nn.QuantStub(), nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8),
                        nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 4, 3), nn.DequantStub())
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.data[:] = rng.normal(0, 0.1, 8)
            m.running_var.data[:] = rng.uniform(0.5, 2, 8)
    qat = Q.calibrate(Q.quantize_qat(net.eval(), groups=[["1", "2", "3"]]),
                      [rng.normal(0, 1, (4, 3, 10, 10)).astype(np.float32)])
    return qat, rng.normal(0, 1, (2, 3, 10, 10)).astype(np.float32)


def test_eval_with_gradients_gives_the_int8_values_and_a_gradient():
    qat, x = _small_net()
    with ty.no_grad():
        want = qat(ty.tensor(x)).numpy()
    np.testing.assert_array_equal(want, Q.quantize(qat)(ty.tensor(x)).numpy())
    xt = ty.tensor(x, requires_grad=True)
    out = qat(xt)
    np.testing.assert_array_equal(out.numpy(), want)
    out.sum().backward()
    assert xt.grad is not None and np.abs(xt.grad.numpy()).sum() > 0
    assert qat[5].weight.grad is not None


def test_observing_and_training_keep_the_float_form():
    qat, x = _small_net()
    conv = qat[5]
    calls = []
    conv.int8_sums = lambda *a, f=conv.int8_sums: calls.append(1) or f(*a)
    Q.enable_observer(qat, True)             # observing (calibration): float outputs to see
    with ty.no_grad():
        qat(ty.tensor(x))
    assert not calls
    Q.enable_observer(qat, None)
    qat.train()
    qat(ty.tensor(x))
    assert not calls
    qat.eval()
    with ty.no_grad():
        qat(ty.tensor(x))
    assert calls
