"""The int8 generators: the CNN32 ones (zoo/gan/cnn32.py, dcgan_cnn32_cifar10 and
wgan_cnn32_cifar10) and the ResNet one (zoo/gan/resnet_gan.py, dcgan_cifar10 at ngf 16, its
bilinear upsampling float between stubs). quantize_qat fuses their ConvTranspose-BN-ReLU and
BN-ReLU groups; calibration and quantize give an int8 generator whose transposed convs run the
native int8 kernel, equal bit for bit to the fake-quant generator (in eval) layer by layer
and as a whole, the same bits on every ISA path."""
import numpy as np
import pytest
from helpers import each_isa
from qnets import assert_layers_equal_qat, record_int8_layers

import tianyuan as ty
from tianyuan import nn
from tianyuan import quantization as Q
from tianyuan import zoo


def _bn_statistics(generator, rng):
    """Running statistics and affine of a trained generator's scale (N(0, 0.02) weights)."""
    for m in generator.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.running_mean.shape[0]
            m.running_mean.data[:] = rng.normal(0, 0.05, c)
            m.running_var.data[:] = rng.uniform(0.5, 2.0, c) * 0.02
            m.weight.data[:] = rng.uniform(0.8, 1.2, c)
            m.bias.data[:] = rng.normal(0, 0.1, c)
    return generator


# name -> (int8 modules of the generator, first layer's int8 class, builder arguments)
ARCHS = {"dcgan_cnn32_cifar10": (5, "ConvTransposeBnReLU2d", {}),
         "wgan_cnn32_cifar10": (6, "Linear", {}),
         "dcgan_cifar10": (18, "Linear", {"ngf": 16, "ndf": 16})}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def generators(request):
    ty.manual_seed(0)
    rng = np.random.default_rng(0)
    gan = zoo.get_model(request.param, **ARCHS[request.param][2])
    for m in gan.generator.modules():
        if isinstance(m, nn.ConvTranspose2d):
            m.weight.data[:] = rng.normal(0, 0.02, m.weight.shape)
    generator = _bn_statistics(gan.generator, rng).eval()
    qat = Q.calibrate(Q.quantize_qat(generator),
                      [rng.standard_normal((8, generator.nz)).astype(np.float32)
                       for _ in range(2)])
    z = rng.standard_normal((4, generator.nz)).astype(np.float32)
    return generator, qat, Q.quantize(qat), z, request.param


def _int8_layers(model):
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, nn.quantized.QuantizedModule) and "weight" in m._buffers]


def test_generator_is_int8_up_to_the_tanh(generators):
    _, qat, int8, _, arch = generators
    count, first, _ = ARCHS[arch]
    assert len(_int8_layers(int8)) == count
    assert type(_int8_layers(int8)[0][1]).__name__ == first
    float_layers = (nn.BatchNorm2d, nn.ConvTranspose2d, nn.Conv2d, nn.Linear)
    assert not any(isinstance(m, float_layers) for m in int8.modules())
    last = int8.out[0] if arch == "dcgan_cifar10" else int8.tanh
    assert isinstance(last, (nn.Tanh, nn.Sigmoid))      # float after the DequantStub


def test_int8_generator_equals_fake_quant(generators):
    """The images are the same bits on every ISA path and the same bits as the fake-quant
    generator's in eval (which computes the int8 integers: nn/qat/module.py)."""
    _, qat, int8, z, _ = generators
    with ty.no_grad():
        want = qat(ty.tensor(z)).numpy()
        for isa in each_isa():
            np.testing.assert_array_equal(int8(ty.tensor(z)).numpy(), want, err_msg=isa)
    assert want.shape == (4, 3, 32, 32) and want.dtype == np.float32


def test_int8_layers_equal_their_qat_twins(generators):
    _, qat, int8, z, _ = generators
    seen = record_int8_layers(int8, z)
    assert_layers_equal_qat(seen, qat)
    assert {name for name, _ in _int8_layers(int8)} <= set(seen)


def test_float_generator_unchanged_by_the_stubs(generators):
    generator, _, _, z, _ = generators
    with ty.no_grad():
        out = generator(ty.tensor(z)).numpy()
    assert out.shape == (4, 3, 32, 32) and np.abs(out).max() <= 1.0
    assert not any(k.startswith(("quant", "dequant", "tanh")) for k in generator.state_dict())


def test_int8_generator_traces_saves_and_loads(generators, tmp_path):
    """jit.trace of the int8 generator (any batch), saved and loaded without the model code,
    gives its images bit for bit (dcgan_cifar10's sigmoid mapped to [-1, 1] by nn.Rescale)."""
    _, _, int8, z, arch = generators
    graph = ty.jit.trace(int8, ty.tensor(z[:2]), dynamic_batch=True)
    graph.save(tmp_path / "g.graph")
    with ty.no_grad():
        want = int8(ty.tensor(z)).numpy()
    for g in (graph, ty.runtime.load(tmp_path / "g.graph")):
        got = g(ty.tensor(z))
        np.testing.assert_array_equal(getattr(got, "numpy", lambda: got)(), want)
