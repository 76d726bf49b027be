"""Every registered classification model: quantize_qat -> calibrate (2 random batches) ->
quantize -> int8 forward at 32x32 gives finite logits of the right shape that pick the
fake-quant model's class; traced (jit.trace, any batch size), it runs on native steps alone
and gives the int8 model's logits bit for bit on other batches. Three of them at 224 x 224:
every int8 conv bit for bit against the reference on every ISA path."""
import numpy as np
import pytest
from helpers import check_quant

import tianyuan as ty
from tianyuan import jit, nn
from tianyuan import quantization as Q
from tianyuan.nn.quantized.conv import relu6_max
from tianyuan.quantization import reference as R

zoo = pytest.importorskip("tianyuan.zoo")
MODELS = zoo.list_models(task="classification") if hasattr(zoo, "list_models") else []


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


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "shufflenet_v2_x1_0"])
def test_zoo_convs_at_224_bit_exact_on_every_isa(name):
    """The kernels' plans (blocks, panels, work splits, layouts) follow the shape: every
    int8 conv of the model at the published 224 x 224, on the input it gets in the model (in
    the model's layout), against the numpy reference on every ISA path."""
    ty.manual_seed(0)
    rng = np.random.default_rng(0)
    qat = Q.quantize_qat(zoo.get_model(name))
    Q.calibrate(qat, [rng.standard_normal((1, 3, 224, 224)).astype(np.float32)])
    int8 = Q.quantize(qat)
    seen = []
    handles = [m.register_forward_hook(lambda mod, args, out, n=n: seen.append((n, mod, args)))
               for n, m in int8.named_modules() if isinstance(m, nn.quantized.Conv2d)]
    with ty.no_grad():
        int8(ty.tensor(rng.standard_normal((1, 3, 224, 224)).astype(np.float32)))
    for handle in handles:
        handle.remove()
    for layer, conv, (x,) in seen:
        q = x.data
        want = R.qconv2d(np.ascontiguousarray(q.view(np.ndarray)), q.zero_point,
                         conv.weight.data, *conv.requant(q.scale), conv.out_zero_point,
                         conv.activation is not None, conv.out_dtype, stride=conv.stride,
                         padding=conv.padding, dilation=conv.dilation, groups=conv.groups)
        if conv.activation == "relu6":
            want = np.minimum(want, relu6_max(conv.out_scale, conv.out_zero_point,
                                              conv.out_dtype)).astype(want.dtype)

        def run():
            conv._cache = {}     # prepared anew on each ISA path
            return np.asarray(conv(x).data)
        check_quant(run, lambda: want, what=f"{name} {layer} {q.shape}")
    assert len(seen) > 15
