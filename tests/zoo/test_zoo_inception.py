"""Inception-v3 in its two forms (zoo/gan/inception.py): torchvision's names and shapes, the
FID graph's pools and input handling, fuse groups in forward order, and its weights through
the .pth converter. Inputs are 75 x 75 (the smallest) to stay fast; the parity test with
pytorch-fid's network skips without torch."""
import os
import sys
from collections import OrderedDict

import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn, weights, zoo
from tianyuan.trainers.cli import main

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "weights"))
import pth_writer  # noqa: E402  (torch-free .pth files, shared with the weights tests)

FID_ENTRY = "fid_inception_v3.imagenet_tf2015_pytorch_fid"
_CACHE = {}


def cached(name):
    if name not in _CACHE:
        ty.manual_seed(0)
        _CACHE[name] = zoo.get_model(name).eval()
    return _CACHE[name]


def scaled_state(arch, seed=0):
    """Random weights that keep activations near 1 through the 94 layers (He-scaled convs,
    BN near identity), in torchvision's names, without num_batches_tracked (as in the
    published files)."""
    rng = np.random.default_rng(seed)
    state = OrderedDict()
    for name, (shape, dtype) in weights.state_dict_spec(arch).items():
        if name.endswith("num_batches_tracked"):
            continue
        if name.endswith("running_var"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("bn.weight"):
            value = 1 + 0.1 * rng.standard_normal(shape)
        elif len(shape) > 1:
            value = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
        else:
            value = 0.1 * rng.standard_normal(shape)
        state[name] = value.astype(dtype)
    return state


def _write_pth(path, state):
    pth_writer.write_zip(path, OrderedDict(
        (k, pth_writer.contiguous(f"s{i}", v)) for i, (k, v) in enumerate(state.items())))


@pytest.mark.parametrize("name", ["inception_v3", "fid_inception_v3"])
def test_state_dict_is_the_published_files_names_and_shapes(name):
    state, spec = cached(name).state_dict(), weights.state_dict_spec(name)
    assert list(state) == list(spec)
    for key, (shape, dtype) in spec.items():
        assert state[key].shape == shape and state[key].dtype == np.dtype(dtype), key
    fixed = weights.state_dict_spec("fid_inception_v3", num_classes=1000)["fc.weight"]
    assert fixed[0] == (1008, 2048)   # the FID graph's class count whatever is asked


def test_registered_apart_from_the_classifiers_with_torchvision_s_size():
    assert zoo.list_models(task="image_features") == ["fid_inception_v3", "inception_v3"]
    assert "inception_v3" not in zoo.list_models(task="classification")
    assert sum(p.size for p in cached("inception_v3").parameters()) == 27161264  # torchvision
    card = zoo.model_card("fid_inception_v3")
    assert card["num_classes"] == 1008 and card["input_size"] == (3, 299, 299)


def test_the_fid_graph_pools_as_tf_does():
    fid, tv = cached("fid_inception_v3"), cached("inception_v3")
    for name in ("Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6b", "Mixed_6e", "Mixed_7b"):
        pool = getattr(fid, name).pool
        assert isinstance(pool, nn.AvgPool2d) and pool.count_include_pad is False, name
        assert getattr(tv, name).pool.count_include_pad is True, name
    assert isinstance(fid.Mixed_7c.pool, nn.MaxPool2d) and fid.Mixed_7c.pool.padding == 1
    assert isinstance(tv.Mixed_7c.pool, nn.AvgPool2d)
    assert fid.AuxLogits is None and fid.fc.out_features == 1008


def test_fid_input_is_resized_to_299_and_scaled_to_minus_one_one():
    model = cached("fid_inception_v3")
    x = ty.tensor(np.random.default_rng(0).random((2, 3, 40, 50)).astype(np.float32))
    got = model.prepare_input(x).numpy()
    want = F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False).numpy()
    np.testing.assert_array_equal(got, want * 2 - 1)
    same = ty.full((1, 3, 299, 299), 0.25)
    np.testing.assert_array_equal(model.prepare_input(same).numpy(), -0.5)   # not resampled


def test_torchvision_transform_input(monkeypatch):
    model = cached("inception_v3")
    assert not model.transform_input            # set by the builder only with weights
    monkeypatch.setattr(model, "transform_input", True)
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float32)
    got = model.prepare_input(ty.tensor(x)).numpy()
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    want = x * (std / 0.5)[:, None, None] + ((mean - 0.5) / 0.5)[:, None, None]
    np.testing.assert_allclose(got, want, atol=1e-6)


def _trace(model, x):
    calls, handles = [], []
    for name, module in model.named_modules():
        if not module._modules:
            hook = (lambda n: lambda m, args, out: calls.append((n, args, out)))(name)
            handles.append(module.register_forward_hook(hook))
    with ty.no_grad():
        feats, logits = model.features_and_logits(x)
    for handle in handles:
        handle.remove()
    return calls, feats, logits


def test_features_logits_and_fuse_groups_in_forward_order():
    model = zoo.FIDInception(resize_input=False).eval()
    model.load_state_dict(scaled_state("fid_inception_v3"), strict=False)
    calls, feats, logits = _trace(model, ty.rand(1, 3, 75, 75))
    assert feats.shape == (1, 2048) and logits.shape == (1, 1008)
    assert np.isfinite(feats.numpy()).all() and 0.01 < feats.numpy().std() < 100
    with ty.no_grad():
        np.testing.assert_array_equal(model(ty.tensor(np.zeros((1, 3, 75, 75), np.float32)))
                                      .shape, (1, 1008))
    names = [c[0] for c in calls]
    assert len(names) == len(set(names)), "a module is called twice in forward"
    by_name = {c[0]: c for c in calls}
    groups = model.fuse_groups()
    for group in groups:
        for prev, cur in zip(group, group[1:]):   # conv -> bn -> relu, nothing between
            assert by_name[cur][1][0] is by_name[prev][2], group
    convs = {n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert convs == {g[0] for g in groups} and len(groups) == 94


def test_aux_head_on_the_17x17_grid():
    model = cached("inception_v3")
    with ty.no_grad():
        assert model.AuxLogits(ty.rand(1, 768, 17, 17)).shape == (1, 1000)
    with pytest.raises(ValueError, match="aux_logits=False"):
        cached("fid_inception_v3").forward_with_aux(ty.rand(1, 3, 75, 75))


def test_pth_imports_and_loads_by_file_and_by_manifest_name(tmp_path, monkeypatch, capsys):
    state = scaled_state("fid_inception_v3", seed=3)
    _write_pth(tmp_path / "pt_inception.pth", state)
    out = tmp_path / "fid.safetensors"
    assert main(["weights", "import", str(tmp_path / "pt_inception.pth"), "--arch",
                 "fid_inception_v3", "--out", str(out)]) == 0
    model = zoo.fid_inception_v3(weights=str(out))
    got = model.state_dict()
    assert all(np.array_equal(got[k], v) for k, v in state.items())
    assert got["Mixed_7c.branch_pool.bn.num_batches_tracked"] == 0
    # offline, the manifest name reads the cached file, or says where to put it
    monkeypatch.setenv("TIANYUAN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TIANYUAN_OFFLINE", "1")
    path = weights.entry_path(weights.get_entry(FID_ENTRY))
    with pytest.raises(weights.OfflineError, match="pt_inception-2015-12-05-6726825d.pth"):
        zoo.fid_inception_v3(pretrained=True)
    os.makedirs(os.path.dirname(path))
    os.replace(tmp_path / "pt_inception.pth", path)
    got = zoo.fid_inception_v3(weights=FID_ENTRY).state_dict()
    assert np.array_equal(got["fc.weight"], state["fc.weight"])


def test_a_torchvision_file_of_another_shape_is_refused_by_name(tmp_path):
    state = scaled_state("fid_inception_v3")
    key = "Mixed_6b.branch7x7_2.conv.weight"
    state[key] = np.ascontiguousarray(state[key][..., :5])    # (128, 128, 1, 5), not 1 x 7
    del state["fc.bias"]
    _write_pth(tmp_path / "bad.pth", state)
    with pytest.raises(weights.NameMapError, match=r"(?s)fc\.bias.*branch7x7_2\.conv\.weight"):
        weights.load_weights(str(tmp_path / "bad.pth"), arch="fid_inception_v3")


def test_same_features_as_pytorch_fid(tmp_path, monkeypatch):
    """pytorch-fid's InceptionV3 with random weights, saved by torch and imported through our
    converter, gives our features within 1e-4 on the same images."""
    torch = pytest.importorskip("torch")
    inception = pytest.importorskip("pytorch_fid.inception")
    state = scaled_state("fid_inception_v3", seed=7)
    monkeypatch.setattr(inception, "load_state_dict_from_url",
                        lambda *a, **k: {k2: torch.from_numpy(v) for k2, v in state.items()},
                        raising=False)
    theirs = inception.InceptionV3([3]).eval()
    torch.save(inception.fid_inception_v3().state_dict(), tmp_path / "fid.pth")
    ours = zoo.fid_inception_v3(weights=str(tmp_path / "fid.pth")).eval()
    images = np.random.default_rng(2).random((2, 3, 64, 80)).astype(np.float32)
    with torch.no_grad():
        want = theirs(torch.from_numpy(images))[0].squeeze(3).squeeze(2).numpy()
    with ty.no_grad():
        got = ours.features_and_logits(ty.tensor(images))[0].numpy()
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
