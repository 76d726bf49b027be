"""Every registered backbone: C2-C5 shapes and strides, the classifier's state less its head,
gradient flow, freezing, QAT -> int8 features, a traced graph (STYLE.md item 14)."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import jit, nn, zoo
from tianyuan import quantization as Q
from zoo_cases import BIG, batch, cached

BACKBONES = zoo.list_backbones()
# one of each family for the slower checks (every whole model is trained and quantized in
# test_zoo_models.py and tests/quantization/test_quant_zoo.py)
FAMILIES = ["resnet18", "resnet50", "mobilenet_v2", "shufflenet_v2_x0_5",
            "shufflenet_v1_x0_5_g3"]
_CACHE = {}


def _backbone(name, **kwargs):
    ty.manual_seed(0)
    return zoo.get_backbone(name, **kwargs)


def _cached(name):
    """A default build in eval mode shared by the tests that only run it."""
    if name not in _CACHE:
        _CACHE[name] = _backbone(name).eval()
    return _CACHE[name]


def _features(model, shape, seed=0):
    with ty.no_grad():
        return model.forward_features(batch(shape, seed=seed)[0])


def test_every_classifier_but_the_demo_net_has_a_backbone():
    assert set(BACKBONES) == set(zoo.list_models(task="classification")) - {"shapesnet"}
    with pytest.raises(KeyError, match="resnet18"):
        zoo.get_backbone("resnet81")
    with pytest.raises(ValueError, match="already registered"):
        zoo.register_backbone("resnet18", zoo.get_backbone)


@pytest.mark.parametrize("name", BACKBONES)
def test_features_have_the_declared_channels_and_strides(name):
    model = _cached(name)
    assert list(model.feature_channels) == list(model.feature_strides) == list(zoo.FEATURES)
    assert [model.feature_strides[k] for k in zoo.FEATURES] == [4, 8, 16, 32]
    size = 32 if name in BIG else 64
    feats = _features(model, (1, 3, size, size))
    assert list(feats) == list(zoo.FEATURES)
    for key, value in feats.items():
        stride = model.feature_strides[key]
        assert value.shape == (1, model.feature_channels[key], size // stride, size // stride)
        assert np.isfinite(value.numpy()).all(), key


def test_resnet50_and_mobilenet_v2_widths():
    assert zoo.get_backbone("resnet50").feature_channels == {"C2": 256, "C3": 512, "C4": 1024,
                                                             "C5": 2048}
    assert zoo.get_backbone("mobilenet_v2").feature_channels == {"C2": 24, "C3": 32, "C4": 96,
                                                                 "C5": 1280}
    assert zoo.get_backbone("shufflenet_v2_x1_0").feature_channels == {"C2": 24, "C3": 116,
                                                                       "C4": 232, "C5": 1024}


@pytest.mark.parametrize("name", BACKBONES)
def test_backbone_is_the_classifier_less_its_head(name):
    classifier = cached(name)
    model = _cached(name)
    head = model.head_prefixes
    state = classifier.state_dict()
    assert list(model.state_dict()) == [k for k in state if not k.startswith(head)]
    assert not any(isinstance(m, (nn.QuantStub, nn.DequantStub)) for m in model.modules())
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith(head)})
    shape = (1, 3, 32, 32)
    ours, theirs = _features(model, shape), _features(classifier, shape)
    for key in zoo.FEATURES:
        np.testing.assert_array_equal(ours[key].numpy(), theirs[key].numpy())


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_small_input_strides(name):
    model = _backbone(name, small_input=True).eval()
    feats = _features(model, (1, 3, 32, 32))
    for key, stride in model.feature_strides.items():
        assert feats[key].shape[2:] == (32 // stride, 32 // stride), key
    assert model.feature_strides["C2"] == (1 if name == "resnet18" else 2)


@pytest.mark.parametrize("name", [n for n in FAMILIES if n != "resnet50"])
def test_gradient_reaches_every_parameter(name):
    model = _backbone(name).train()
    feats = model.forward_features(batch((2, 3, 64, 64))[0])
    sum(((f * f).mean() for f in feats.values()), ty.tensor(0.0)).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, missing


@pytest.mark.parametrize("name, n", [("resnet18", 0), ("resnet50", 1), ("resnet18", 4),
                                     ("mobilenet_v2", 2), ("shufflenet_v2_x0_5", 3)])
def test_freeze_at_freezes_the_stem_and_first_stages(name, n):
    model = _backbone(name, freeze_at=n).train()
    stages = model.stages()
    frozen = [f"{m}." for key in ("stem",) + zoo.FEATURES[:n] for m in stages[key]]
    for pname, param in model.named_parameters():
        assert param.requires_grad == (not pname.startswith(tuple(frozen))), pname
    for mname, module in model.named_modules():
        inside = f"{mname}.".startswith(tuple(frozen))
        if isinstance(module, (nn.BatchNorm2d, nn.FrozenBatchNorm2d)):
            assert isinstance(module, nn.FrozenBatchNorm2d) == inside, mname
    before = {k: v for k, v in model.state_dict().items() if k.startswith(tuple(frozen))}
    feats = model.forward_features(batch((2, 3, 32, 32))[0])
    if n < 4 or not name.startswith("resnet"):      # a ResNet frozen at 4 has nothing to train
        feats["C5"].mean().backward()
    after = model.state_dict()
    assert all(np.array_equal(after[k], v) for k, v in before.items())   # statistics too
    with pytest.raises(ValueError, match="0 \\(the stem\\) to 4"):
        zoo.freeze_stages(model, 5)


def test_frozen_bn_backbone_loads_classifier_weights(tmp_path):
    classifier = cached("resnet18")
    ty.save(classifier.state_dict(), tmp_path / "r18.safetensors")
    model = zoo.get_backbone("resnet18", weights=str(tmp_path / "r18.safetensors"),
                             frozen_bn=True).train()
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert list(model.parameters()) and all(p.requires_grad for p in model.parameters())
    state = classifier.state_dict()
    assert list(model.state_dict()) == [k for k in state if not k.startswith("fc.")
                                        and not k.endswith("num_batches_tracked")]
    shape = (1, 3, 32, 32)
    ours, theirs = _features(model, shape), _features(classifier, shape)   # train = eval
    np.testing.assert_allclose(ours["C5"].numpy(), theirs["C5"].numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="layer3.2.conv1.weight"):
        zoo.get_backbone("resnet34", weights=str(tmp_path / "r18.safetensors"))


def _int8_features(model, batches):
    qat = Q.quantize_qat(zoo.FeatureExtractor(model))
    Q.calibrate(qat, batches)
    int8 = Q.quantize(qat)
    with ty.no_grad():
        return qat(ty.tensor(batches[0])), int8(ty.tensor(batches[0]))


@pytest.mark.parametrize("name", FAMILIES)
def test_backbone_quantizes(name):
    """quantize_qat -> calibrate -> quantize of the features alone: the int8 features are
    the fake-quant model's within a few rounding steps (the mobile nets' bit for bit here;
    the ResNets' residual adds round a step apart now and then, and that grows with depth)."""
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(2)]
    ref, out = _int8_features(_backbone(name), batches)
    for key in zoo.FEATURES:
        want, got = ref[key].numpy(), out[key].numpy()
        assert got.shape == want.shape and got.dtype == np.float32, key
        assert np.linalg.norm(got - want) <= 0.05 * np.linalg.norm(want), key


def test_detection_style_backbone_quantizes():
    """freeze_at=1 and every BN frozen, as a detector's ResNet: conv + frozen BN fold."""
    model = _backbone("resnet18", freeze_at=1, frozen_bn=True)
    qat = Q.quantize_qat(zoo.FeatureExtractor(model))
    bns = [m.bn for m in qat.modules() if isinstance(m, nn.qat.ConvBn2d)]
    assert len(bns) == 20 and all(isinstance(bn, nn.FrozenBatchNorm2d) for bn in bns)
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(2)]
    ref, out = _int8_features(model, batches)
    for key in zoo.FEATURES:
        want, got = ref[key].numpy(), out[key].numpy()
        assert np.linalg.norm(got - want) <= 0.05 * np.linalg.norm(want), key


class _AsTuple(nn.Module):
    """jit.trace takes Tensors or tuples: the features in C2-C5 order."""

    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return tuple(self.body.forward_features(x).values())


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "shufflenet_v2_x0_5"])
def test_backbone_traces_to_the_same_features(name):
    model = _AsTuple(_backbone(name)).eval()
    graph = jit.trace(model, batch((1, 3, 64, 64))[0])
    x = batch((1, 3, 64, 64), seed=1)[0]
    with ty.no_grad():
        for got, want in zip(graph(x), model(x)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
