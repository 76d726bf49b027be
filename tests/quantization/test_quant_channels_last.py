"""Channels-last int8 activations outside the conv (its engine: test_quant_conv_nhwc.py): the
layout helpers, max and global average pooling, the residual add; int8 models that carry
the layout (`quantize` sets `Conv2d.channels_last` where every conv has groups 1) give the
bits of the NCHW model, and each layer's output after the first conv is channels-last where
that layout wins."""
import numpy as np
import pytest
from helpers import check_quant, each_isa, guarded_copy

import tianyuan as ty
from tianyuan import quantization as Q
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R

zoo = pytest.importorskip("tianyuan.zoo")


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (2, 3, 9, 15), (1, 3, 8, 16), (1, 64, 9, 9),
                                   (3, 17, 1, 130), (1, 1, 4, 4)])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_to_channels_last(shape, dtype):
    """Every ISA path: 3 channels by VBMI permutes where the CPU has them (64 pixels a step,
    a last step of 35, 7 or none), else the plain loop."""
    x = np.random.default_rng(0).integers(-128, 128, shape).astype(dtype)
    for isa in each_isa():
        y = K.to_channels_last(x)
        assert K.is_channels_last(y) and y.dtype == dtype
        assert y.transpose(0, 2, 3, 1).flags.c_contiguous
        np.testing.assert_array_equal(y, x, err_msg=isa)


@pytest.mark.parametrize("geom", [(3, 2, 1), (2, 2, 0), (3, 1, 1), ((3, 2), (2, 1), (1, 0))])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("channels", [20, 64, 130])
def test_max_pool2d_channels_last(geom, dtype, channels):
    """Every ISA path (AVX-512: 64 channels a step, a masked last one)."""
    kernel, stride, padding = geom
    x = np.random.default_rng(1).integers(-128, 128, (2, channels, 9, 11)).astype(dtype)

    def native():
        y = K.max_pool2d(K.to_channels_last(x), kernel, stride, padding)
        assert K.is_channels_last(y)
        return y
    check_quant(native, lambda: R.max_pool2d(x, kernel, stride, padding))


@pytest.mark.parametrize("channels", [20, 64, 130])
def test_max_pool2d_channels_last_reads_nothing_past_the_input(channels):
    """The input's last byte the last of a readable page: the AVX-512 kernel loads whole
    64-channel steps unmasked and only a part-filled last step masked."""
    x = np.random.default_rng(2).integers(0, 256, (2, 5, 7, channels), dtype=np.uint8)
    nhwc, keep = guarded_copy(x)
    y = nhwc.transpose(0, 3, 1, 2)  # (N, C, H, W), channels-last
    check_quant(lambda: K.max_pool2d(y, 3, 2, 1), lambda: R.max_pool2d(y, 3, 2, 1))
    del y, nhwc, keep


@pytest.mark.parametrize("dtype,zp", [(np.uint8, 37), (np.uint8, 250), (np.int8, -5),
                                      (np.int8, 100)])
def test_avg_pool2d_channels_last(dtype, zp):
    """Global pooling sums each image's pixels in place (every ISA path; sums below the zero
    point round toward minus infinity as the reference's); other windows take a copy."""
    x = np.random.default_rng(2).integers(-128, 128, (3, 70, 7, 5)).astype(dtype)
    cl = K.to_channels_last(x)
    check_quant(lambda: K.avg_pool2d(cl, zp, (7, 5)), lambda: R.avg_pool2d(x, zp, (7, 5)))
    np.testing.assert_array_equal(K.avg_pool2d(cl, zp, 3, 2, 1),
                                  R.avg_pool2d(x, zp, 3, 2, 1))


@pytest.mark.parametrize("layouts", [(True, True), (True, False), (False, True)])
def test_add_channels_last(layouts):
    rng = np.random.default_rng(3)
    a, b = (rng.integers(0, 256, (2, 12, 5, 6)).astype(np.uint8) for _ in range(2))
    ma, mb, shift = R.add_multipliers(0.03, 0.05, 0.06)
    add = K.PreparedAdd(100, 7, ma, mb, shift, 9, True, np.uint8)
    inputs = [K.to_channels_last(v) if cl else v for v, cl in zip((a, b), layouts)]
    expected = R.add(a, 100, b, 7, ma, mb, shift, 9, True, np.uint8)
    for got in (add(*inputs), K.add(inputs[0], 100, inputs[1], 7, ma, mb, shift, 9, True,
                                    np.uint8)):
        assert K.is_channels_last(got) and not got.flags.c_contiguous
        np.testing.assert_array_equal(got, expected)


def test_carries_channels_last():
    assert Q.carries_channels_last([ty.nn.Conv2d(3, 64, 3), ty.nn.Conv2d(64, 96, 1)])
    assert not Q.carries_channels_last([ty.nn.Conv2d(3, 64, 3),
                                        ty.nn.Conv2d(64, 64, 3, groups=64)])
    assert not Q.carries_channels_last([ty.nn.Conv2d(3, 64, 3), ty.nn.Conv2d(64, 32, 1)])
    assert not Q.carries_channels_last([])


@pytest.mark.parametrize("name,qconfig,carries", [
    ("resnet18", Q.ema_fakequant_qconfig, True), ("mobilenet_v2", Q.ema_fakequant_qconfig, False),
    ("resnet18", Q.int8_symmetric_qconfig, False)])
def test_int8_model_channels_last(name, qconfig, carries):
    """The int8 model's logits are the same bits either way; with the layout on (convs of
    groups 1 only, uint8 activations only), every quantized layer's 4-D output after the
    first conv is channels-last where that layout wins (else NCHW throughout), and the
    dequantized result is C-contiguous."""
    ty.manual_seed(0)
    rng = np.random.default_rng(0)
    qat = Q.quantize_qat(zoo.get_model(name, num_classes=10), qconfig)
    batches = [rng.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(2)]
    Q.calibrate(qat, batches)
    int8 = Q.quantize(qat)
    convs = [m for m in int8.modules() if isinstance(m, ty.nn.quantized.Conv2d)]
    assert {c.channels_last for c in convs} == {carries}
    layouts = []
    for m in int8.modules():
        if isinstance(m, ty.nn.quantized.QuantizedModule):
            m.register_forward_hook(lambda m, i, o: layouts.append(
                K.is_channels_last(o.data) and not o.data.flags.c_contiguous
                if o.data.ndim == 4 and o.data.shape[2:] != (1, 1) else None))
    x = ty.tensor(batches[0])
    with ty.no_grad():
        out = int8(x).numpy()
        assert out.flags.c_contiguous
        seen = [v for v in layouts[1:] if v is not None]  # past the QuantStub's
        assert seen and all(v == (carries and K.channels_last_wins()) for v in seen)
        for conv in convs:
            conv.channels_last = False
        np.testing.assert_array_equal(int8(x).numpy(), out)
