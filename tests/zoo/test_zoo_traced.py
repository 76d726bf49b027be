"""The pose models (float and int8) and pytorch-fid's Inception (its resize to 299 and the
[-1, 1] scaling are modules) trace, save and load into graph files that give the model's own
output bit for bit (the GAN generators: tests/quantization/test_quant_gan.py)."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import quantization as Q
from tianyuan import zoo


def _int8(model, x):
    return Q.quantize(Q.calibrate(Q.quantize_qat(model), [x]))


def _same_after_save(model, x, tmp_path):
    graph = ty.jit.trace(model, ty.tensor(x))
    graph.save(tmp_path / "m.graph")
    with ty.no_grad():
        want = model(ty.tensor(x)).numpy()
    for g in (graph, ty.runtime.load(tmp_path / "m.graph")):
        np.testing.assert_array_equal(g(ty.tensor(x)).numpy(), want)


@pytest.mark.parametrize("arch", ["simplebaseline_small", "mspn_small"])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_pose_models_trace(arch, precision, tmp_path):
    ty.manual_seed(0)
    model = zoo.get_model(arch).eval()
    x = np.random.default_rng(0).random((2, 3, 64, 64)).astype(np.float32)
    _same_after_save(model if precision == "fp32" else _int8(model, x), x, tmp_path)


def test_fid_inception_traces_with_its_resize(tmp_path):
    ty.manual_seed(0)
    model = zoo.get_model("fid_inception_v3").eval()
    x = np.random.default_rng(1).random((1, 3, 32, 32)).astype(np.float32)
    _same_after_save(model, x, tmp_path)
