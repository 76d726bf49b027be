"""A user's own model quantizes without writing its fuse groups: the fusable runs of its
Sequentials are found (conv -> BN -> ReLU, ...), and a float layer with no int8 form between
int8 ones runs in float there (dequantized in, quantized out) instead of failing."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn
from tianyuan import quantization as Q


def own_model():
    ty.manual_seed(0)
    return nn.Sequential(
        nn.QuantStub(),
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8),
        nn.Sigmoid(),                                   # no int8 form: a float island
        nn.Conv2d(8, 8, 1), nn.ReLU(),
        nn.Flatten(), nn.Linear(8 * 6 * 6, 4),
        nn.DequantStub())


def test_sequential_groups_are_found():
    assert Q.sequential_groups(own_model()) == [["1", "2", "3"], ["4", "5"], ["7", "8"]]
    nested = nn.Sequential(nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU()), nn.Linear(4, 2),
                           nn.ReLU())
    assert sorted(Q.sequential_groups(nested)) == [["0.0", "0.1"], ["1", "2"]]


def test_own_sequential_quantizes_with_a_float_island():
    model = own_model()
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((4, 3, 6, 6)).astype(np.float32) for _ in range(3)]
    model.train()
    with ty.no_grad():
        for x in batches:          # BN statistics of the data
            model(ty.tensor(x))
    model.eval()
    qat = Q.calibrate(Q.quantize_qat(model, Q.get_qconfig("calibration")), batches)
    assert type(qat[1]).__name__ == "ConvBnReLU2d" and type(qat[6]).__name__ == "FloatIsland"
    int8 = Q.quantize(qat)
    assert type(int8[1]).__name__ == "ConvBnReLU2d" and type(int8[7]).__name__ == "ConvReLU2d"
    x = ty.tensor(batches[0])
    with ty.no_grad():
        want, fake, got = model(x).numpy(), qat(x).numpy(), int8(x).numpy()
    assert got.dtype == np.float32 and got.shape == (4, 4)
    scale = int8[10].out_scale
    assert np.abs(got - fake).max() <= 2.01 * scale         # int8 follows its fake-quant model
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()


def test_float_island_outside_the_int8_region_passes_float():
    model = nn.Sequential(nn.QuantStub(), nn.Conv2d(3, 4, 1), nn.DequantStub(), nn.Tanh())
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)
    int8 = Q.quantize(Q.calibrate(Q.quantize_qat(model.eval(), Q.get_qconfig("calibration")),
                                  [x]))
    with ty.no_grad():
        out = int8(ty.tensor(x))
    assert not Q.is_quantized(out) and out.dtype == np.float32
    conv = int8[1]                                   # tanh is 1-Lipschitz: within its step
    with ty.no_grad():
        want = model(ty.tensor(x)).numpy()
    assert np.abs(out.numpy() - want).max() <= conv.out_scale


def test_zoo_models_keep_their_own_groups_and_no_islands():
    from tianyuan import zoo
    model = zoo.get_model("resnet18", num_classes=4)
    qat = Q.quantize_qat(model)
    assert not [m for m in qat.modules() if type(m).__name__ == "FloatIsland"]
    with pytest.raises(ValueError, match="cannot fuse"):
        Q.fuse(own_model(), [["1", "6"]])
