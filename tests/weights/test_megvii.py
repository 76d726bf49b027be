"""Megvii/MegEngine weights -> our zoo models: logits equal to Megvii's own networks.

The oracles (megvii_reference.py) re-write Megvii's forwards in tianyuan ops from their
source, run on random weights in their names and layouts; the files go through
`tianyuan weights import` like a downloaded one.
"""
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import megvii_reference as ref
import tianyuan as ty
from pth_writer import contiguous, write_zip
from tianyuan import weights, zoo
from tianyuan.weights import NameMapError, convert_state_dict
from tianyuan.weights.cli import main as weights_cli

RTOL = 1e-4


def _image(seed=1):
    return np.random.default_rng(seed).standard_normal((1, 3, 64, 64)).astype(np.float32)


def _megengine_save(path, state):
    """What megengine.save writes: a pickled OrderedDict of numpy arrays."""
    with open(path, "wb") as handle:
        pickle.dump(OrderedDict(state), handle, protocol=pickle.DEFAULT_PROTOCOL)


def _import(tmp_path, src, arch, fmt):
    out = tmp_path / f"{arch}.safetensors"
    assert weights_cli(["import", str(src), "--arch", arch, "--format", fmt,
                        "--out", str(out)]) == 0
    return out


def _assert_logits_equal(model, converted_path, expected, x):
    model.load_state_dict(weights.load_weights(converted_path, arch=None), strict=True)
    got = model.eval()(ty.tensor(x)).numpy()
    scale = np.abs(expected).max()
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= RTOL * scale, np.abs(got - expected).max() / scale


def test_megengine_shufflenet_v2_x0_5_computes_megvii_forward(tmp_path):
    state, x = ref.v2_state("0.5x", seed=2), _image()
    expected = ref.v2_forward(state, ty.tensor(x)).numpy()
    _megengine_save(tmp_path / "snetv2_x0_5.pkl", state)
    out = _import(tmp_path, tmp_path / "snetv2_x0_5.pkl", "shufflenet_v2_x0_5", "megengine")
    _assert_logits_equal(zoo.shufflenet_v2_x0_5(num_classes=10), out, expected, x)


def test_megengine_shufflenet_v2_file_through_the_zoo(tmp_path):
    state, x = ref.v2_state("0.5x", seed=5), _image(3)
    path = tmp_path / "snetv2.pkl"
    _megengine_save(path, {"epoch": 240, "state_dict": state})   # a training checkpoint
    model = zoo.shufflenet_v2_x0_5(num_classes=10, weights=str(path)).eval()
    expected = ref.v2_forward(state, ty.tensor(x)).numpy()
    got = model(ty.tensor(x)).numpy()
    assert np.abs(got - expected).max() <= RTOL * np.abs(expected).max()


def test_wider_megengine_shufflenet_v2_is_refused_naming_the_widths(tmp_path, capsys):
    # Megvii's stage-2 first unit: branch_proj keeps the 24 stem channels, branch_main
    # makes 116 - 24 = 92; ours has 58 + 58. Not the same network.
    state = ref.v2_state("1.0x")
    with pytest.raises(NameMapError, match="branch_proj with 24 outputs and branch_main "
                                           "with 92"):
        convert_state_dict(state, "shufflenet_v2_x1_0", "megengine")
    _megengine_save(tmp_path / "snetv2_x1_0.pkl", state)
    code = weights_cli(["import", str(tmp_path / "snetv2_x1_0.pkl"), "--arch",
                        "shufflenet_v2_x1_0", "--format", "megengine",
                        "--out", str(tmp_path / "o.safetensors")])
    assert code == 2 and "two branches of 58" in capsys.readouterr().err


def test_megengine_resnet18_computes_megengine_forward(tmp_path):
    state, x = ref.resnet18_state(seed=4), _image(2)
    assert state["bn1.running_mean"].shape == (1, 64, 1, 1) and state["bn1.weight"].shape == (64,)
    expected = ref.resnet18_forward(state, ty.tensor(x)).numpy()
    _megengine_save(tmp_path / "resnet18.pkl", state)
    out = _import(tmp_path, tmp_path / "resnet18.pkl", "resnet18", "megengine")
    _assert_logits_equal(zoo.resnet18(num_classes=10), out, expected, x)


def _write_pth(path, state):
    write_zip(path, OrderedDict((f"module.{k}", contiguous(f"s{i}", v))
                                for i, (k, v) in enumerate(state.items())))


def test_megvii_shufflenet_v1_g3_computes_megvii_forward(tmp_path):
    # ShuffleNet-Series V1: the same units as ours, but the inverse channel shuffle
    state, x = ref.v1_state(3, "0.5x", seed=6), _image(4)
    expected = ref.v1_forward(state, ty.tensor(x), 3).numpy()
    _write_pth(tmp_path / "snetv1.pth", state)
    out = _import(tmp_path, tmp_path / "snetv1.pth", "shufflenet_v1_x0_5_g3", "torchvision")
    converted = weights.load_weights(out, arch="shufflenet_v1_x0_5_g3")
    assert not converted["fc.bias"].any()   # Megvii's classifier has no bias
    _assert_logits_equal(zoo.shufflenet_v1_x0_5_g3(num_classes=10), out, expected, x)


def test_megvii_shufflenet_v1_g8_with_unmatched_shuffle_is_refused():
    state = ref.v1_state(8, "0.5x")
    with pytest.raises(NameMapError, match=r"views the 48 middle channels as \(6, 8\)"):
        convert_state_dict(state, "shufflenet_v1_x0_5_g8", "torchvision")


def test_megengine_shufflenet_v1_is_another_network():
    # MegEngine Models' V1: ConvBn names and a 1x1 stride-2 projection added, not concat
    state = {"first_conv.0.conv.weight": np.zeros((24, 3, 3, 3), np.float32),
             "features.0.branch_proj.conv.weight": np.zeros((240, 24, 1, 1), np.float32)}
    with pytest.raises(NameMapError, match="average-pooled input"):
        convert_state_dict(state, "shufflenet_v1_x1_5_g3", "megengine")


def test_megengine_quantization_resnet_names():
    # official/quantization/models/resnet.py fuses conv+bn: conv_bn_relu1.conv / .bn
    float_state = ref.resnet18_state(seed=7)
    renames = [("conv1.", "conv_bn_relu1.conv."), ("bn1.", "conv_bn_relu1.bn."),
               (".conv1.", ".conv_bn_relu1.conv."), (".bn1.", ".conv_bn_relu1.bn."),
               (".conv2.", ".conv_bn2.conv."), (".bn2.", ".conv_bn2.bn."),
               (".downsample.0.", ".downsample.conv."), (".downsample.1.", ".downsample.bn.")]
    quant_state = OrderedDict()
    for key, value in float_state.items():
        new = key
        for old, repl in renames:
            if (old.startswith(".") and old in new) or new.startswith(old):
                new = new.replace(old, repl, 1)
                break
        quant_state[new] = value
    assert "layer2.0.conv_bn2.bn.running_var" in quant_state
    a = convert_state_dict(float_state, "resnet18", "megengine")
    b = convert_state_dict(quant_state, "resnet18", "megengine")
    assert list(a) == list(b) and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("arch, group, size", [("shufflenet_v1_x0_5_g3", 3, "0.5x"),
                                              ("shufflenet_v1_x1_0_g3", 3, "1.0x")])
def test_v1_files_convert_to_the_zoo_models_names_and_shapes(arch, group, size):
    """The converter reads the groups from the file; the built model is the spec."""
    state = ref.v1_state(group, size, num_classes=1000)
    spec = weights.spec_of(zoo.get_model(arch))
    out = convert_state_dict(state, arch, "torchvision", spec=spec)
    assert list(out) == list(spec)


def test_manifest_megengine_shufflenet_entries():
    small = weights.get_entry("shufflenet_v2_x0_5.imagenet_megengine")
    assert small.converter == "megengine" and small.sha256_kind == "none"
    assert small.urls[0].endswith("/snetv2_x0_5_60750_c28db1a2.pkl")
    for name in ("shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0"):
        entry = weights.get_entry(f"{name}.imagenet_megengine")
        assert entry.converter is None and "not convertible" in entry.notes
        assert weights.default_entry(name).format == "torchvision"
