"""Every registered classification model: quantize_qat -> calibrate (2 random batches) ->
quantize -> int8 forward at 32x32 gives finite logits of the right shape that pick the
fake-quant model's class; traced (jit.trace, any batch size), it runs on native steps alone
and gives the int8 model's logits bit for bit on other batches."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import jit
from tianyuan import quantization as Q

zoo = pytest.importorskip("tianyuan.zoo")
MODELS = zoo.list_models() if hasattr(zoo, "list_models") else []


@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_quantizes(name):
    ty.manual_seed(0)
    rng = np.random.default_rng(0)
    qat = Q.quantize_qat(zoo.get_model(name, num_classes=10))
    batches = [rng.standard_normal((4, 3, 32, 32)).astype(np.float32) for _ in range(2)]
    Q.calibrate(qat, batches)
    int8 = Q.quantize(qat)
    with ty.no_grad():
        ref, out = qat(ty.tensor(batches[0])).numpy(), int8(ty.tensor(batches[0])).numpy()
    assert out.shape == (4, 10) and out.dtype == np.float32 and np.isfinite(out).all()
    spread = ref.max(1) - ref.min(1)
    decided = spread > 1e-6              # random-init heads may give all-equal logits
    assert (ref.argmax(1) == out.argmax(1))[decided].mean() >= 0.75 if decided.any() else True
    graph = jit.trace(int8, ty.tensor(batches[0]), dynamic_batch=True)   # checks batch 5 too
    assert all(s.native for s in graph.steps), [s.name for s in graph.steps if not s.native]
    with ty.no_grad():
        want = int8(ty.tensor(batches[1][:3])).numpy()
    np.testing.assert_array_equal(graph(ty.tensor(batches[1][:3])).numpy(), want)
