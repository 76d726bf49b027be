"""Pose zoo: SimpleBaseline and MSPN shapes and names (the official release's, MegEngine's),
their files converting and reproducing the source model's heatmaps, the losses against numpy,
gradient flow, fusing and tracing. Tiny inputs (64 pixels) throughout."""
import os
import pickle
import sys
from collections import OrderedDict

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import quantization, weights, zoo
from tianyuan.zoo.keypoints import (coarse_to_fine_targets, joints_mse_loss, mspn_loss,
                                    ohkm_loss)
from tianyuan.zoo.keypoints.losses import scale_targets

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "weights"))
import pth_writer  # noqa: E402  (torch-free .pth files)

SMALL = ("simplebaseline_small", "mspn_small")


def build(name, seed=0, **kwargs):
    ty.manual_seed(seed)
    return zoo.get_model(name, **kwargs)


def crops(n=2, h=64, w=64, seed=0):
    return ty.tensor(np.random.default_rng(seed).standard_normal((n, 3, h, w)).astype(np.float32))


def targets(n=2, k=3, h=16, w=16, seed=0):
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:h, 0:w]
    cy, cx = rng.integers(2, h - 2, (n, k)), rng.integers(2, w - 2, (n, k))
    maps = np.exp(-((xs - cx[..., None, None]) ** 2 + (ys - cy[..., None, None]) ** 2) / 8.0)
    weight = np.ones((n, k), np.float32)
    weight[0, 1] = 0
    return maps.astype(np.float32), weight


def test_registered_with_the_keypoints_task():
    assert zoo.list_models(task="keypoints") == [
        "mspn_2stage", "mspn_4stage", "mspn_small", "simplebaseline_res101",
        "simplebaseline_res152", "simplebaseline_res18", "simplebaseline_res50",
        "simplebaseline_small"]
    card = zoo.model_card("simplebaseline_small")
    assert card["task"] == "keypoints" and card["num_joints"] == 17


@pytest.mark.parametrize("name", SMALL + ("simplebaseline_res18",))
def test_heatmaps_at_a_quarter_and_every_parameter_learns(name):
    model = build(name, num_joints=3).train()
    assert model(crops(h=64, w=96)).shape == (2, 3, 16, 24)
    target, weight = targets(h=16, w=24)
    losses = model.losses(crops(h=64, w=96), target, weight)
    assert all(k.startswith("loss") and np.isfinite(float(v.numpy())) for k, v in losses.items())
    sum(losses.values()).backward()
    silent = [n for n, p in model.named_parameters() if p.grad is None or not np.any(p.grad.numpy())]
    assert silent == []


def test_simplebaseline_res50_has_the_official_names():
    state = build("simplebaseline_res50").state_dict()
    head = [k for k in state if k.startswith(("deconv_layers", "final_layer"))]
    assert sorted({k.split(".")[1] for k in head if k.startswith("deconv")}) == \
        ["0", "1", "3", "4", "6", "7"]
    assert state["deconv_layers.0.weight"].shape == (2048, 256, 4, 4)
    assert state["final_layer.weight"].shape == (17, 256, 1, 1)
    assert "conv1.weight" in state and "layer4.2.bn3.running_var" in state
    assert not any(k.startswith(("fc.", "backbone.")) for k in state)


def test_mspn_4stage_has_megengine_names():
    state = build("mspn_4stage").state_dict()
    assert state["head.0.bias"].shape == (64,) and "head.7.running_var" in state
    body = "stages.Stage_0_body."
    assert state[body + "up1.0.weight"].shape == (256, 1536, 1, 1)
    assert state[body + "deconv3.0.weight"].shape == (256, 256, 4, 4)
    assert state[body + "deconv3.0.bias"].shape == (256,)
    layers = [len({k.split(".")[4] for k in state if k.startswith(body + f"down.layer{i}.")})
              for i in range(1, 5)]
    assert layers == [5, 5, 6, 3]
    assert "stages.Stage_3_tail.tail_3.weight" in state and "stages.Stage_2_next.0.weight" in state
    assert "stages.Stage_3_next.0.weight" not in state
    assert not any("skip" in k for k in state)          # MegEngine's: no cross-stage skips


def _outputs(model, x):
    return model.eval()(x).numpy()


def test_official_pth_with_module_prefix_loads_and_reproduces(tmp_path):
    source = build("simplebaseline_res18", seed=1, num_joints=3).eval()
    tensors = OrderedDict((f"module.{k}", pth_writer.contiguous(f"s{i}", v))
                          for i, (k, v) in enumerate(source.state_dict().items())
                          if not k.endswith("num_batches_tracked"))   # a 2018 file's
    path = tmp_path / "pose_resnet_18_256x192.pth.tar"
    pth_writer.write_legacy(path, {"epoch": 140, "state_dict": tensors})
    model = zoo.simplebaseline_res18(num_joints=3, weights=str(path))
    np.testing.assert_array_equal(_outputs(model, crops()), _outputs(source, crops()))


def _megengine_arrays(state):
    """MegEngine's layout: BN arrays and conv biases (1, C, 1, 1), no num_batches_tracked."""
    out = OrderedDict()
    for key, value in state.items():
        if key.endswith("num_batches_tracked"):
            continue
        out[key] = value.reshape(1, -1, 1, 1) if value.ndim == 1 else value
    return out


def test_megengine_simplebaseline_renamed_with_its_3x3_last_layer(tmp_path):
    source = build("simplebaseline_res18", seed=2, num_joints=3, final_kernel=3).eval()
    renamed = OrderedDict()
    for key, value in source.state_dict().items():
        key = key.replace("final_layer.", "last_layer.").replace("deconv_layers.",
                                                                 "deconv_layers.body.")
        renamed[key if key.startswith(("deconv", "last")) else "backbone." + key] = value
    path = tmp_path / "simplebaseline_res18_0to255.pkl"
    path.write_bytes(pickle.dumps({"epoch": 200, "state_dict": _megengine_arrays(renamed)}))
    model = zoo.simplebaseline_res18(num_joints=3, weights=str(path))
    assert model.final_layer.kernel_size == (3, 3)
    np.testing.assert_array_equal(_outputs(model, crops()), _outputs(source, crops()))


def test_megengine_mspn_file_loads_by_name(tmp_path):
    source = build("mspn_small", seed=3, num_joints=3, cross_stage=False).eval()
    path = tmp_path / "mspn_small_0_255.pkl"
    path.write_bytes(pickle.dumps({"state_dict": _megengine_arrays(source.state_dict())}))
    converted = weights.load_weights(path, arch="mspn_small")
    assert list(converted) == list(source.state_dict())
    model = zoo.mspn_small(num_joints=3, cross_stage=False, weights=str(path))
    np.testing.assert_array_equal(_outputs(model, crops()), _outputs(source, crops()))


def test_a_file_of_another_model_is_refused_by_name(tmp_path):
    path = tmp_path / "other.pkl"
    path.write_bytes(pickle.dumps({"state_dict": _megengine_arrays(
        build("mspn_small", num_joints=3, cross_stage=False).state_dict())}))
    with pytest.raises(RuntimeError, match="skip_down"):       # the cross-stage convs missing
        zoo.mspn_small(num_joints=3, weights=str(path))


def test_heatmap_range_is_divided_out():
    model = build("simplebaseline_small", num_joints=3).eval()
    plain = _outputs(model, crops())
    model.heatmap_range = 255.0
    np.testing.assert_allclose(_outputs(model, crops()), plain / 255.0, rtol=1e-6)
    assert weights.get_entry("mspn_4stage.coco_megengine").preprocessing["heatmap_range"] == 255


# ---------------------------------------------------------------- losses

def test_joints_mse_is_half_the_weighted_mean_square():
    pred = np.random.default_rng(1).random((2, 3, 16, 16)).astype(np.float32)
    target, weight = targets()
    want = 0.5 * np.mean(((pred - target) * weight[..., None, None]) ** 2)
    got = joints_mse_loss(ty.tensor(pred), target, weight)
    np.testing.assert_allclose(float(got.numpy()), want, rtol=1e-6)
    with pytest.raises(ValueError, match="another joint count"):
        joints_mse_loss(ty.tensor(pred), target[:, :2], weight[:, :2])


def test_an_unlabelled_joint_gets_no_gradient():
    pred = ty.tensor(np.random.default_rng(2).random((2, 3, 16, 16)).astype(np.float32),
                     requires_grad=True)
    target, weight = targets()
    joints_mse_loss(pred, target, weight).backward()
    grad = pred.grad.numpy()
    assert not grad[0, 1].any() and grad[0, 0].any()


def test_ohkm_takes_each_samples_hardest_joints():
    pred = np.random.default_rng(3).random((2, 3, 16, 16)).astype(np.float32)
    target, weight = targets()
    per_joint = 0.5 * np.mean(((pred - target) * weight[..., None, None]) ** 2, axis=(2, 3))
    want = np.mean(np.sort(per_joint, axis=1)[:, ::-1][:, :2].mean(axis=1))
    got = ohkm_loss(ty.tensor(pred), target, weight, topk=2)
    np.testing.assert_allclose(float(got.numpy()), want, rtol=1e-6)


def test_coarse_to_fine_targets_sit_at_the_peaks():
    target, weight = targets()
    wide, narrow = coarse_to_fine_targets(target, weight, (3.0, 1.0))
    flat = target.reshape(2, 3, -1).argmax(-1)
    assert np.array_equal(narrow.reshape(2, 3, -1).argmax(-1)[weight > 0], flat[weight > 0])
    assert not wide[0, 1].any() and (wide > 0.5).sum() > (narrow > 0.5).sum()
    outputs = [[ty.tensor(t) for t in coarse_to_fine_targets(target, weight, (4, 3, 2, 1))]]
    losses = mspn_loss(outputs, target, weight, (4, 3, 2, 1), topk=2)
    assert max(float(v.numpy()) for v in losses.values()) < 1e-12


# ---------------------------------------------------------------- deployment

@pytest.mark.parametrize("name", SMALL)
def test_fused_and_traced_equal_eager(name):
    model = build(name, num_joints=3).eval()
    x = crops(n=1)
    eager = _outputs(model, x)
    traced = ty.jit.trace(model, x)
    np.testing.assert_allclose(traced(x).numpy(), eager, atol=1e-5)
    fused = quantization.fuse(model, model.fuse_groups())
    np.testing.assert_allclose(fused(x).numpy(), eager, atol=1e-4)


def test_mspn_takes_the_datas_own_kernels():
    target, weight = targets()
    five = np.stack(coarse_to_fine_targets(target, weight, (5, 4, 3, 2, 1)), axis=1)
    stages = scale_targets(five, weight, None, num_stages=2)
    assert [t[0].max() for t in stages] and np.array_equal(stages[0][0], five[:, 0])
    assert np.array_equal(stages[1][0], five[:, 1]) and np.array_equal(stages[1][3], five[:, 4])
    with pytest.raises(ValueError, match="S = 4 or 5"):
        scale_targets(five[:, :3], weight, None, num_stages=2)
