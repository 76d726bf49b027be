"""Name maps and load_weights with synthetic state dicts in the zoo's names and shapes (the
built models' specs: weights keeps no tables for them)."""
import pickle
from collections import OrderedDict

import numpy as np
import pytest

from pth_writer import contiguous, write_legacy, write_zip
from tianyuan import zoo
from tianyuan.weights import (NameMapError, check_against_spec, convert_state_dict,
                              list_entries, load_weights, spec_of, state_dict_spec)
from zoo_specs import random_state, spec

# the classifiers the manifest can convert
CONVERTIBLE = sorted({e.arch for e in list_entries() if e.converter}
                     & set(zoo.list_models(task="classification")))


def test_spec_names_follow_torchvision():
    """REFERENCE.md 1e's names, in the zoo's built models."""
    r18 = spec("resnet18")
    assert "layer2.0.downsample.0.weight" in r18 and "layer1.0.downsample.0.weight" not in r18
    assert r18["bn1.num_batches_tracked"] == ((), "int64")
    mb = spec("mobilenet_v2")
    assert mb["features.1.conv.0.0.weight"][0] == (32, 1, 3, 3)
    assert mb["features.2.conv.1.0.weight"][0] == (96, 1, 3, 3)
    assert mb["classifier.1.weight"][0] == (1000, 1280)
    sh = spec("shufflenet_v2_x1_0")
    assert sh["stage2.0.branch1.2.weight"][0] == (58, 24, 1, 1)
    assert "stage2.1.branch1.0.weight" not in sh and sh["conv5.0.weight"][0] == (1024, 464, 1, 1)


def test_weights_keeps_no_spec_of_the_zoos_classifiers():
    with pytest.raises(KeyError, match=r"spec_of\(zoo.get_model"):
        state_dict_spec("resnet18")
    assert spec_of(random_state("resnet18")) == spec("resnet18")


@pytest.mark.parametrize("arch", CONVERTIBLE)
def test_torchvision_map_is_identity(arch):
    state = random_state(arch)
    for given in (None, spec(arch)):
        out = convert_state_dict(state, arch, "torchvision", spec=given)
        assert list(out) == list(state)
        for name in state:
            assert out[name] is state[name]


def test_legacy_files_without_num_batches_tracked_and_dataparallel_prefix():
    state = random_state("resnet18")
    legacy = OrderedDict((f"module.{k}", v) for k, v in state.items()
                         if not k.endswith("num_batches_tracked"))
    for given in (None, spec("resnet18")):
        out = convert_state_dict(legacy, "resnet18", "torchvision", spec=given)
        assert list(out) == list(state)      # each filled in after its running_var
        assert out["bn1.num_batches_tracked"].dtype == np.int64
        assert out["bn1.num_batches_tracked"] == 0


def test_num_classes_from_the_file():
    state = random_state("mobilenet_v2", num_classes=10)
    out = convert_state_dict(state, "mobilenet_v2", "torchvision",
                             spec=spec("mobilenet_v2", num_classes=10))
    assert out["classifier.1.weight"].shape == (10, 1280)


def test_errors_list_unmapped_missing_and_misshaped_keys():
    state = random_state("resnet18")
    del state["layer1.0.conv1.weight"]
    state["layer9.extra.weight"] = np.zeros(3, np.float32)
    state["layer2.0.conv2.weight"] = np.zeros((128, 128, 1, 1), np.float32)
    with pytest.raises(NameMapError) as info:
        convert_state_dict(state, "resnet18", "torchvision", spec=spec("resnet18"))
    text = str(info.value)
    assert "1 unmapped keys" in text and "layer9.extra.weight" in text
    assert "1 missing keys" in text and "layer1.0.conv1.weight" in text
    assert "layer2.0.conv2.weight: file (128, 128, 1, 1), expected (128, 128, 3, 3)" in text


def test_wrong_arch_is_a_clear_error():
    with pytest.raises(NameMapError, match="missing keys"):
        convert_state_dict(random_state("resnet18"), "resnet34", "torchvision",
                           spec=spec("resnet34"))


def _megengine_resnet(arch):
    """MegEngine-style ResNet arrays: BN params and stats as (1, C, 1, 1), no num_batches."""
    out = OrderedDict()
    for name, value in random_state(arch).items():
        if name.endswith("num_batches_tracked"):
            continue
        if value.ndim == 1 and not name.startswith("fc."):
            value = value.reshape(1, -1, 1, 1)
        out[name] = value
    return out


def test_megengine_resnet_map(tmp_path):
    state = _megengine_resnet("resnet18")
    path = tmp_path / "resnet18_me.pkl"
    path.write_bytes(pickle.dumps({"epoch": 90, "state_dict": state}, protocol=4))
    out = load_weights(path, arch="resnet18")      # no spec: the layout alone is undone
    assert out["bn1.weight"].shape == (64,)
    np.testing.assert_array_equal(out["bn1.running_var"], state["bn1.running_var"].reshape(-1))
    check_against_spec(out, spec("resnet18"), "megengine -> resnet18")
    assert list(out) == list(spec("resnet18"))
    assert load_weights(path, arch="resnet18", spec=spec("resnet18")).keys() == out.keys()


def test_megengine_map_is_for_resnets_and_shufflenets():
    with pytest.raises(NameMapError, match="not a ResNet or a ShuffleNet"):
        convert_state_dict(random_state("mobilenet_v2"), "mobilenet_v2", "megengine")


def test_megengine_shufflenet_needs_the_megvii_layout():
    with pytest.raises(NameMapError, match="first_conv"):
        convert_state_dict({}, "shufflenet_v2_x0_5", "megengine")


def _as_pth_records(state):
    return OrderedDict((k, contiguous(str(i), v)) for i, (k, v) in enumerate(state.items()))


@pytest.mark.parametrize("writer", [write_zip, write_legacy])
def test_load_weights_from_pth(tmp_path, writer):
    state = random_state("shufflenet_v2_x0_5", seed=3)
    path = tmp_path / "s.pth"
    writer(path, _as_pth_records(state))
    out = load_weights(path, arch="shufflenet_v2_x0_5")
    assert list(out) == list(state)
    for name in state:
        np.testing.assert_array_equal(out[name], state[name])
