"""torchvision names and shapes, parameter counts, and loading weights into zoo models."""
import logging
import os
import sys
from collections import OrderedDict

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn, weights, zoo
from zoo_cases import TORCHVISION_ARCHS, TORCHVISION_PARAMS, batch, cached

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "weights"))
import pth_writer  # noqa: E402  (torch-free .pth files, shared with the weights tests)
from zoo_specs import random_state  # noqa: E402  (synthetic state dicts in the zoo's names)


def _num_params(model):
    return sum(p.size for p in model.parameters())


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_parameter_count_is_torchvision(name):
    assert _num_params(cached(name)) == TORCHVISION_PARAMS[name]
    assert zoo.model_card(name)["num_params"] == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize("name", TORCHVISION_ARCHS)
def test_loads_a_synthetic_torchvision_state_dict_by_name(name):
    state = random_state(name, seed=3)
    model = cached(name)
    model.load_state_dict(state, strict=True)
    loaded = model.state_dict()
    assert all(np.array_equal(loaded[k], v) for k, v in state.items())


def _write_pth(path, state):
    pth_writer.write_zip(path, OrderedDict(
        (k, pth_writer.contiguous(f"s{i}", v)) for i, (k, v) in enumerate(state.items())))


def test_weights_path_loads_a_torchvision_file(tmp_path):
    state = random_state("resnet18", seed=4)
    _write_pth(tmp_path / "resnet18.pth", state)
    model = zoo.resnet18(weights=str(tmp_path / "resnet18.pth"))
    assert all(np.array_equal(model.state_dict()[k], v) for k, v in state.items())


def test_pretrained_uses_the_default_entry_and_keeps_a_new_head(tmp_path, monkeypatch, caplog):
    # the cached file of resnet18's default entry is trusted as is (no network)
    monkeypatch.setenv("TIANYUAN_HOME", str(tmp_path))
    monkeypatch.setenv("TIANYUAN_OFFLINE", "1")
    entry = weights.default_entry("resnet18")
    path = weights.entry_path(entry)
    os.makedirs(os.path.dirname(path))
    state = random_state("resnet18", seed=5)
    _write_pth(path, state)
    assert np.array_equal(zoo.resnet18(pretrained=True).state_dict()["fc.weight"],
                          state["fc.weight"])
    ty.manual_seed(0)
    with caplog.at_level(logging.WARNING, logger="tianyuan.zoo"):
        model = zoo.get_model("resnet18", num_classes=10, pretrained=True)
    assert "without its 1000-class classifier" in caplog.text
    got = model.state_dict()
    assert got["fc.weight"].shape == (10, 512)
    assert all(np.array_equal(got[k], v) for k, v in state.items() if not k.startswith("fc."))


def test_a_file_of_another_arch_is_refused_by_name(tmp_path):
    _write_pth(tmp_path / "resnet18.pth", random_state("resnet18"))
    with pytest.raises(Exception, match="layer3.2.conv1.weight"):
        zoo.resnet34(weights=str(tmp_path / "resnet18.pth"))


def test_weights_and_pretrained_together_is_an_error():
    with pytest.raises(ValueError, match="not both"):
        zoo.resnet18(weights="x", pretrained=True)


def test_our_own_fine_tuned_file_loads_with_its_head(tmp_path):
    ty.manual_seed(0)
    tuned = zoo.mobilenet_v2(num_classes=10, width_mult=1.0)
    ty.save(tuned.state_dict(), tmp_path / "tuned.safetensors")
    model = zoo.mobilenet_v2(num_classes=10, weights=str(tmp_path / "tuned.safetensors"))
    assert all(np.array_equal(a, b) for a, b in zip(model.state_dict().values(),
                                                    tuned.state_dict().values()))


def test_shufflenet_v1_weights_file_round_trip(tmp_path):
    ty.manual_seed(0)
    model = zoo.shufflenet_v1(groups=8, width_mult=0.5)
    ty.save(model.state_dict(), tmp_path / "v1.safetensors")
    again = zoo.shufflenet_v1(groups=8, width_mult=0.5, weights=str(tmp_path / "v1.safetensors"))
    assert all(np.array_equal(a, b) for a, b in zip(again.state_dict().values(),
                                                    model.state_dict().values()))


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_small_input_keeps_resolution_for_cifar(name):
    ty.manual_seed(0)
    model = zoo.get_model(name, num_classes=10, small_input=True).eval()
    stem = model.conv1 if name == "resnet18" else model.features[0][0]
    assert stem.stride == (1, 1) and stem.kernel_size == (3, 3)
    with ty.no_grad():
        assert model(batch((2, 3, 32, 32))[0]).shape == (2, 10)
        last = model.forward_features(batch((2, 3, 32, 32))[0])["C5"].shape
    # 32x32 -> 4x4 (ResNet: 3 stride-2 stages) / 2x2 (MobileNetV2: 4 stride-2 rows)
    assert last[2:] == ((4, 4) if name == "resnet18" else (2, 2))
    assert model.feature_strides["C5"] == (8 if name == "resnet18" else 16)


def test_mobilenet_v2_width_mult():
    ty.manual_seed(0)
    model = zoo.mobilenet_v2(width_mult=0.5)
    assert model.features[0][0].out_channels == 16 and model.last_channel == 1280
    assert zoo.mobilenet_v2(width_mult=1.4).last_channel == 1792


@pytest.mark.parametrize("groups, width, stages", [
    (1, 1.0, [144, 288, 576]), (2, 1.0, [200, 400, 800]), (3, 1.0, [240, 480, 960]),
    (4, 1.0, [272, 544, 1088]), (8, 1.0, [384, 768, 1536]), (3, 0.5, [120, 240, 480]),
    (8, 0.5, [192, 384, 768]), (3, 1.5, [360, 720, 1440]), (8, 2.0, [768, 1536, 3072])])
def test_shufflenet_v1_channels_follow_the_paper(groups, width, stages):
    from tianyuan.zoo.classification.shufflenet_v1 import channels
    stem, widths = channels(groups, width)
    assert widths == stages and stem % groups == 0
    model = zoo.shufflenet_v1(groups=groups, width_mult=width)
    first = model.stage2[0]
    assert first.conv1.groups == 1 and model.stage2[1].conv1.groups == groups
    assert model.fc.in_features == stages[-1]


def test_shufflenet_v1_released_parameter_counts():
    # parameters + BN running statistics, as MindCV counts Megvii's models: 0.73M/1.89M/3.48M
    for name, millions in (("shufflenet_v1_x0_5_g3", 0.73), ("shufflenet_v1_x1_0_g3", 1.89),
                           ("shufflenet_v1_x1_5_g3", 3.48)):
        model = zoo.get_model(name)
        stats = sum(2 * m.num_features for m in model.modules() if isinstance(m, nn.BatchNorm2d))
        assert round((_num_params(model) + stats) / 1e6, 2) == millions, name
