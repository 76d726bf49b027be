"""Detection zoo: RetinaNet against transcriptions of torchvision's rules; the small
RetinaNet's interface, losses and training; torchvision's state-dict names and the v1 file's
renames. Tiny shapes throughout. Its parts (anchors, box coder, matcher, transform, FPN):
test_zoo_detection_parts.py."""
import math
import os
import re
import sys
from collections import OrderedDict

import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn, quantization, weights, zoo
from tianyuan.zoo.detection.retinanet import flatten_levels

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "weights"))
import pth_writer  # noqa: E402  (torch-free .pth files)

SMALL = dict(num_classes=4, min_size=64, max_size=96, fpn_channels=16)


def small_retinanet(seed=0, **kwargs):
    ty.manual_seed(seed)
    return zoo.retinanet_resnet18_fpn(**{**SMALL, **kwargs})


def images(seed=0, sizes=((3, 60, 80), (3, 50, 40))):
    rng = np.random.default_rng(seed)
    return [rng.random(s).astype(np.float32) for s in sizes]


TARGETS = [{"boxes": np.array([[5, 8, 40, 50], [30, 10, 70, 35]], np.float32),
            "labels": np.array([1, 3])},
           {"boxes": np.array([[2, 3, 30, 45]], np.float32), "labels": np.array([2])}]


# ---------------------------------------------------------------- RetinaNet

def test_eval_output_format_on_two_image_sizes():
    model = small_retinanet(score_thresh=0.0, detections_per_img=50).eval()
    ims = images()
    out = model(ims)
    assert len(out) == 2
    for det, im in zip(out, ims):
        assert set(det) == {"boxes", "scores", "labels"}
        k = det["boxes"].shape[0]
        assert 0 < k <= 50 and det["boxes"].shape == (k, 4) and det["boxes"].dtype == np.float32
        assert det["scores"].shape == (k,) and det["labels"].shape == (k,)
        assert det["labels"].dtype == np.int64 and det["labels"].max() < SMALL["num_classes"]
        assert np.all(np.diff(det["scores"]) <= 0)               # by decreasing score
        h, w = im.shape[1:]
        assert det["boxes"].min() >= 0 and np.all(det["boxes"][:, 2] <= w + 1e-3)
        assert np.all(det["boxes"][:, 3] <= h + 1e-3)
    # a fresh head scores every anchor at its prior (0.01 < 0.05): no detections by default
    assert all(len(d["boxes"]) == 0 for d in small_retinanet().eval()(ims[:1]))
    with pytest.raises(ValueError, match="needs targets"):
        small_retinanet().train()(ims)


def focal_ref(x, t, alpha=0.25, gamma=2.0):
    p = 1 / (1 + np.exp(-x))
    ce = -(t * np.log(p) + (1 - t) * np.log(1 - p))
    p_t = p * t + (1 - p) * (1 - t)
    return (alpha * t + (1 - alpha) * (1 - t)) * (1 - p_t) ** gamma * ce


def test_losses_are_torchvisions_per_image_sums():
    """compute_loss on given head outputs = torchvision's loop: per image, focal loss summed
    over the anchors not ignored and L1 over the foreground's codes, each over the
    foreground count; then the mean over images (float64 reference)."""
    model = small_retinanet().train()
    rng = np.random.default_rng(1)
    grids, k = [(8, 12), (4, 6), (2, 3), (1, 2), (1, 1)], SMALL["num_classes"]
    cls = [ty.tensor(rng.normal(0, 2, (2, 9 * k, h, w)).astype(np.float32)) for h, w in grids]
    reg = [ty.tensor(rng.normal(0, 1, (2, 36, h, w)).astype(np.float32)) for h, w in grids]
    anchors = model.anchor_generator((64, 96), grids)
    losses = model.compute_loss([dict(t, labels=t["labels"].astype(np.int64)) for t in TARGETS],
                                cls, reg, anchors)
    logits = flatten_levels(cls, k).numpy().astype(np.float64)
    codes = flatten_levels(reg, 4).numpy().astype(np.float64)
    want_cls, want_box = 0.0, 0.0
    for i, target in enumerate(TARGETS):
        matched = model.proposal_matcher(F.box_iou(target["boxes"], anchors).numpy())
        fg = np.flatnonzero(matched >= 0)
        onehot = np.zeros_like(logits[i])
        onehot[fg, target["labels"][matched[fg]]] = 1
        valid = matched != -2
        want_cls += focal_ref(logits[i][valid], onehot[valid]).sum() / max(1, fg.size)
        gt = model.box_coder.encode(target["boxes"][matched[fg]], anchors[fg])
        want_box += np.abs(codes[i][fg] - gt).sum() / max(1, fg.size)
    np.testing.assert_allclose(losses["loss_cls"].item(), want_cls / 2, rtol=1e-4)
    np.testing.assert_allclose(losses["loss_box_reg"].item(), want_box / 2, rtol=1e-4)


def test_training_losses_are_finite_and_decrease():
    model = small_retinanet(trainable_backbone_layers=0).train()   # backbone frozen: fast
    params = [p for p in model.parameters() if p.requires_grad]
    assert params and not any(p.requires_grad for p in model.backbone.body.parameters())
    opt = ty.optim.SGD(params, lr=0.05, momentum=0.9)
    ims, history = images(), []
    for _ in range(4):
        losses = model(ims, TARGETS)
        assert set(losses) == {"loss_cls", "loss_box_reg"}
        total = losses["loss_cls"] + losses["loss_box_reg"]
        assert np.isfinite(total.item()) and total.shape == ()
        opt.zero_grad()
        total.backward()
        opt.step()
        history.append(total.item())
    assert history[-1] < history[0], history
    # an image without boxes is all background; bad targets are named
    empty = {"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64)}
    assert np.isfinite(model(ims[:1], [empty])["loss_cls"].item())
    with pytest.raises(ValueError, match="target 0: boxes need positive width"):
        model(ims[:1], [{"boxes": np.array([[5, 5, 5, 9]], np.float32), "labels": [1]}])
    with pytest.raises(ValueError, match=r"labels must be in \[0, 4\)"):
        model(ims[:1], [{"boxes": np.array([[5, 5, 9, 9]], np.float32), "labels": [4]}])


def test_trainable_backbone_layers_and_frozen_batchnorm():
    model = small_retinanet()       # no pretrained weights: BatchNorm2d, every layer trains
    assert all(p.requires_grad for p in model.parameters())
    body = small_retinanet(trainable_backbone_layers=3).backbone.body
    assert not body.conv1.weight.requires_grad and not body.layer1[0].conv1.weight.requires_grad
    assert body.layer2[0].conv1.weight.requires_grad
    assert isinstance(body.layer1[0].bn1, nn.FrozenBatchNorm2d)
    assert isinstance(body.layer2[0].bn1, nn.BatchNorm2d)
    with pytest.raises(ValueError, match="0 to 5"):
        small_retinanet(trainable_backbone_layers=6)


def torchvision_retinanet_keys(layers=(3, 4, 6, 3), frozen=True):
    """retinanet_resnet50_fpn's state-dict names in torchvision's order (its module tree:
    IntermediateLayerGetter over ResNet, FeaturePyramidNetwork v2, RetinaNetHead)."""
    bn = ["weight", "bias", "running_mean", "running_var"] + ([] if frozen else
                                                              ["num_batches_tracked"])
    keys = ["conv1.weight"] + [f"bn1.{b}" for b in bn]
    for stage, blocks in enumerate(layers, start=1):
        for i in range(blocks):
            block = f"layer{stage}.{i}"
            for j in (1, 2, 3):
                keys += [f"{block}.conv{j}.weight"] + [f"{block}.bn{j}.{b}" for b in bn]
            if i == 0:
                keys += [f"{block}.downsample.0.weight"]
                keys += [f"{block}.downsample.1.{b}" for b in bn]
    keys = [f"backbone.body.{k}" for k in keys]
    for part in ("inner_blocks", "layer_blocks"):
        keys += [f"backbone.fpn.{part}.{i}.0.{p}" for i in range(3) for p in ("weight", "bias")]
    keys += [f"backbone.fpn.extra_blocks.{c}.{p}" for c in ("p6", "p7") for p in ("weight", "bias")]
    for branch, last in (("classification_head", "cls_logits"), ("regression_head", "bbox_reg")):
        keys += [f"head.{branch}.conv.{k}.0.{p}" for k in range(4) for p in ("weight", "bias")]
        keys += [f"head.{branch}.{last}.{p}" for p in ("weight", "bias")]
    return keys


def test_state_dict_names_are_torchvisions():
    ty.manual_seed(0)
    model = zoo.retinanet_resnet50_fpn()
    nn.convert_frozen_batchnorm(model.backbone.body)     # as built under pretrained weights
    state = model.state_dict()
    assert list(state) == torchvision_retinanet_keys()
    assert state["head.classification_head.cls_logits.weight"].shape == (9 * 91, 256, 3, 3)
    assert state["head.regression_head.bbox_reg.weight"].shape == (36, 256, 3, 3)
    assert state["backbone.fpn.inner_blocks.0.0.weight"].shape == (256, 512, 1, 1)
    assert state["backbone.fpn.extra_blocks.p6.weight"].shape == (256, 256, 3, 3)   # from P5
    np.testing.assert_allclose(state["head.classification_head.cls_logits.bias"],
                               -math.log(99), rtol=1e-6)
    assert sum(p.size for p in model.parameters()) == 34014999     # torchvision's num_params
    card = zoo.model_card("retinanet_resnet50_fpn")
    assert card["task"] == "detection" and card["metrics"]["torchvision"] == {"box_map": 36.4}
    assert card["preprocessing"]["min_size"] == 800 and card["num_classes"] == 91
    assert zoo.list_models(task="detection") == [
        "fasterrcnn_resnet18_fpn", "fasterrcnn_resnet50_fpn", "fasterrcnn_small",
        "retinanet_resnet18_fpn", "retinanet_resnet50_fpn", "retinanet_small"]
    small = zoo.model_card("retinanet_small")
    assert small["preprocessing"]["min_size"] == 128 and small["backbone"] == "resnet18"
    ty.manual_seed(0)
    model = zoo.get_model("retinanet_small", num_classes=3, max_size=160)
    assert model.backbone.out_channels == 64 and model.transform.min_size == (128,)
    assert model.transform.max_size == 160 and model.num_classes == 3


def _as_v1(state):
    """Our names as the published v1 file has them, with torchvision's _metadata (v1)."""
    out = OrderedDict()
    for key, value in state.items():
        key = re.sub(r"^(backbone\.fpn\.(inner|layer)_blocks\.\d+)\.0\.", r"\1.", key)
        key = re.sub(r"^(head\.\w+_head\.conv)\.(\d)\.0\.",
                     lambda m: f"{m.group(1)}.{2 * int(m.group(2))}.", key)
        out[key] = value
    out._metadata = OrderedDict([("backbone.fpn", {"version": 1}),
                                 ("head.classification_head", {"version": 1}),
                                 ("head.regression_head", {"version": 1})])
    return out


def test_a_v1_torchvision_file_loads_renamed_with_eps_zero(tmp_path):
    ref = small_retinanet(seed=3, trainable_backbone_layers=5)
    nn.convert_frozen_batchnorm(ref.backbone.body)
    state = OrderedDict((k, np.asarray(v)) for k, v in ref.state_dict().items())
    v1 = _as_v1(state)
    assert "backbone.fpn.inner_blocks.0.weight" in v1 and "head.regression_head.conv.6.bias" in v1
    converted = weights.convert_state_dict(v1, "retinanet_resnet18_fpn", "torchvision")
    assert list(converted) == list(state)
    path = tmp_path / "retinanet_v1.pth"
    v1_file = OrderedDict((k, pth_writer.contiguous(f"s{i}", v)) for i, (k, v)
                          in enumerate(v1.items()))
    v1_file._metadata = v1._metadata
    pth_writer.write_zip(path, v1_file)
    model = zoo.retinanet_resnet18_fpn(**SMALL, weights=str(path))
    assert all(np.array_equal(model.state_dict()[k], v) for k, v in state.items())
    frozen = [m for m in model.modules() if isinstance(m, nn.FrozenBatchNorm2d)]
    assert frozen and all(m.eps == 0.0 for m in frozen)
    assert not model.backbone.body.layer1[0].conv1.weight.requires_grad   # 3 trainable
    # a new class head for fine-tuning: the rest loads, the head keeps its init
    other = zoo.retinanet_resnet18_fpn(**{**SMALL, "num_classes": 2}, weights=str(path))
    assert other.head.classification_head.cls_logits.weight.shape[0] == 9 * 2
    assert np.array_equal(other.state_dict()["head.regression_head.bbox_reg.weight"],
                          state["head.regression_head.bbox_reg.weight"])
    # `tianyuan weights import`: our names in safetensors, which load with the model's eps
    out = tmp_path / "retinanet.safetensors"
    weights.import_file(str(path), str(out), "retinanet_resnet18_fpn")
    ours = zoo.retinanet_resnet18_fpn(**SMALL, weights=str(out))
    assert all(np.array_equal(ours.state_dict()[k], v) for k, v in state.items())
    assert ours.backbone.body.bn1.eps == 1e-5


def test_pretrained_backbone_loads_the_classifiers_weights(tmp_path, monkeypatch):
    """The backbone's default ImageNet entry, cached (offline): its weights less fc, frozen
    BatchNorm, three stages trained."""
    monkeypatch.setenv("TIANYUAN_HOME", str(tmp_path))
    monkeypatch.setenv("TIANYUAN_OFFLINE", "1")
    path = weights.entry_path(weights.default_entry("resnet18"))
    os.makedirs(os.path.dirname(path))
    rng = np.random.default_rng(7)
    state = OrderedDict((k, (rng.standard_normal(np.shape(v)) * 0.1 + 1).astype(v.dtype)
                         if v.dtype == np.float32 else np.asarray(v))
                        for k, v in zoo.resnet18().state_dict().items())
    pth_writer.write_zip(path, OrderedDict((k, pth_writer.contiguous(f"s{i}", v))
                                           for i, (k, v) in enumerate(state.items())))
    model = zoo.retinanet_resnet18_fpn(**SMALL, pretrained_backbone=True)
    body = model.backbone.body.state_dict()
    assert all(np.array_equal(body[k], v) for k, v in state.items()
               if k in body and not k.startswith("fc."))
    assert isinstance(model.backbone.body.layer4[1].bn2, nn.FrozenBatchNorm2d)
    assert model.backbone.body.bn1.eps == 1e-5
    trainable = {n.split(".")[2] for n, p in model.named_parameters()
                 if p.requires_grad and n.startswith("backbone.body.")}
    assert trainable == {"layer2", "layer3", "layer4"}


def test_qat_ready():
    """quantize_qat fuses the body's conv-BN(-ReLU) and the heads' conv-ReLU pairs and runs."""
    model = small_retinanet(score_thresh=0.0, detections_per_img=10)
    groups = model.fuse_groups()
    assert ["head.classification_head.conv.0.0", "head.classification_head.conv.0.1"] in groups
    assert ["backbone.body.conv1", "backbone.body.bn1", "backbone.body.relu"] in groups
    qat = quantization.quantize_qat(model)
    assert type(qat.head.classification_head.conv[0][0]).__name__ == "ConvReLU2d"
    ims = images(sizes=((3, 40, 60),))
    assert np.isfinite(qat.train()(ims, TARGETS[:1])["loss_cls"].item())
    assert qat.eval()(ims)[0]["boxes"].shape[1] == 4


def test_matches_torchvision_when_installed():
    """Optional: the same weights in torchvision's RetinaNet give the same detections."""
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision")
    from torchvision.models.detection import RetinaNet as TVRetinaNet
    from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7 as TVP6P7
    torch.manual_seed(0)
    body = tv.models.resnet18(norm_layer=tv.ops.misc.FrozenBatchNorm2d)
    backbone = _resnet_fpn_extractor(body, 5, [2, 3, 4], extra_blocks=TVP6P7(256, 256))
    theirs = TVRetinaNet(backbone, num_classes=4, min_size=64, max_size=96,
                         score_thresh=0.3).eval()
    torch.nn.init.zeros_(theirs.head.classification_head.cls_logits.bias)   # scores near 0.5
    ours = zoo.retinanet_resnet18_fpn(num_classes=4, min_size=64, max_size=96, score_thresh=0.3)
    nn.convert_frozen_batchnorm(ours.backbone.body)
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    ours.load_state_dict(state, strict=True)
    ours.eval()
    ims = images()
    with torch.no_grad():
        want = theirs([torch.from_numpy(im) for im in ims])
    got = ours(ims)
    for g, w in zip(got, want):
        assert len(g["labels"]) > 0
        g, w = _canonical(g), _canonical({k: v.numpy() for k, v in w.items()})
        assert g["labels"].tolist() == w["labels"].tolist()
        np.testing.assert_allclose(g["scores"], w["scores"], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(g["boxes"], w["boxes"], rtol=1e-4, atol=1e-2)


def _canonical(detections):
    """Detections by score, then label and box: the order of exactly equal scores (ties of
    a random head) is the sort's, which differs between torch and numpy."""
    boxes, scores, labels = (np.asarray(detections[k]) for k in ("boxes", "scores", "labels"))
    order = np.lexsort((np.round(boxes[:, 1], 2), np.round(boxes[:, 0], 2), labels, -scores))
    return {"boxes": boxes[order], "scores": scores[order], "labels": labels[order]}
