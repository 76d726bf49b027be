"""Faster R-CNN (zoo/detection/faster_rcnn.py, rpn.py, roi_heads.py): the training losses
and their gradients, eval outputs, the two label layouts, torchvision's state-dict names and
parameter count, the published v1 file's renames through the converter. Tiny shapes."""
import os
import re
import sys
from collections import OrderedDict

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn, weights, zoo
from tianyuan.zoo.detection.rpn import sample_fg_bg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "weights"))
import pth_writer  # noqa: E402  (torch-free .pth files)

SMALL = dict(num_classes=4, min_size=64, max_size=96, fpn_channels=16, representation_size=32)
TARGETS = [{"boxes": np.array([[5, 8, 40, 50], [30, 10, 70, 35]], np.float32),
            "labels": np.array([1, 3])},
           {"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64)}]
LOSSES = {"loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg"}


def images(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.random((3, 60, 80)).astype(np.float32), rng.random((3, 50, 40)).astype(np.float32)]


def small(seed=0, **kwargs):
    ty.manual_seed(seed)
    return zoo.fasterrcnn_resnet18_fpn(**{**SMALL, **kwargs})


def test_train_losses_are_finite_and_reach_every_part():
    model = small(extra_background=True).train()
    losses = model(images(), TARGETS)
    assert set(losses) == LOSSES
    assert all(np.isfinite(float(v.item())) and float(v.item()) > 0 for v in losses.values())
    sum(losses.values()).backward()
    for name in ("backbone.body.conv1.weight", "backbone.fpn.layer_blocks.0.0.weight",
                 "rpn.head.cls_logits.weight", "rpn.head.bbox_pred.weight",
                 "roi_heads.box_head.fc6.weight", "roi_heads.box_predictor.bbox_pred.weight"):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and np.abs(grad.numpy()).sum() > 0, name


def test_eval_returns_detections_in_each_images_pixels():
    model = small(extra_background=True, box_score_thresh=0.0).eval()
    out = model(images())
    assert len(out) == 2
    for det, (h, w) in zip(out, [(60, 80), (50, 40)]):
        k = det["boxes"].shape[0]
        assert 0 < k <= 100 and det["boxes"].dtype == np.float32
        assert det["scores"].shape == (k,) and det["labels"].shape == (k,)
        assert det["labels"].min() >= 0 and det["labels"].max() < 4        # 0-based labels
        assert (det["boxes"] >= 0).all() and (det["boxes"][:, 2] <= w + 1e-3).all()
        assert (det["boxes"][:, 3] <= h + 1e-3).all()
        assert np.all(np.diff(det["scores"]) <= 0) or len(set(det["labels"])) > 1


def test_torchvision_layout_keeps_column_zero_for_the_background():
    model = small(num_classes=5).train()             # labels 1..4 are columns 1..4
    assert model.roi_heads.box_predictor.cls_score.out_features == 5
    assert set(model(images(), TARGETS)) == LOSSES
    with pytest.raises(ValueError, match="background"):
        model(images(), [{"boxes": TARGETS[0]["boxes"], "labels": np.array([0, 1])},
                         TARGETS[1]])
    assert small(extra_background=True).roi_heads.box_predictor.cls_score.out_features == 5
    model.eval()
    assert all((d["labels"] >= 1).all() for d in model(images()))


def test_sampler_keeps_the_fraction_and_the_budget():
    labels = np.array([1] * 10 + [0] * 100 + [-1] * 5)
    pos, neg = sample_fg_bg(labels, 16, 0.25)
    assert pos.size == 4 and neg.size == 12 and (labels[pos] == 1).all()
    assert (labels[neg] == 0).all() and len(set(pos)) == 4
    pos, neg = sample_fg_bg(labels[:12], 16, 0.5)     # 8 positives at most; 2 negatives
    assert pos.size == 8 and neg.size == 2               # are all there are


def torchvision_keys(model):
    body = [k for k in model.state_dict() if k.startswith("backbone.body.")]
    fpn = [f"backbone.fpn.{kind}_blocks.{i}.0.{p}" for kind in ("inner", "layer")
           for i in range(4) for p in ("weight", "bias")]
    rest = [f"{m}.{p}" for m in ("rpn.head.conv.0.0", "rpn.head.cls_logits", "rpn.head.bbox_pred",
                                 "roi_heads.box_head.fc6", "roi_heads.box_head.fc7",
                                 "roi_heads.box_predictor.cls_score",
                                 "roi_heads.box_predictor.bbox_pred") for p in ("weight", "bias")]
    return body + fpn + rest


def test_state_dict_names_and_size_are_torchvisions():
    ty.manual_seed(0)
    model = zoo.fasterrcnn_resnet50_fpn()
    nn.convert_frozen_batchnorm(model.backbone.body)       # as built under pretrained weights
    state = model.state_dict()
    assert list(state) == torchvision_keys(model)
    assert state["roi_heads.box_head.fc6.weight"].shape == (1024, 256 * 7 * 7)
    assert state["roi_heads.box_predictor.bbox_pred.weight"].shape == (91 * 4, 1024)
    assert state["rpn.head.cls_logits.weight"].shape == (3, 256, 1, 1)
    assert sum(p.size for p in model.parameters()) == 41755286      # torchvision's num_params
    card = zoo.model_card("fasterrcnn_resnet50_fpn")
    assert card["metrics"]["torchvision"] == {"box_map": 37.0} and card["num_classes"] == 91
    entry = weights.get_entry("fasterrcnn_resnet50_fpn.coco_torchvision")
    assert entry.urls[0].endswith("fasterrcnn_resnet50_fpn_coco-258fb6c6.pth")


def test_a_v1_torchvision_file_loads_renamed_with_eps_zero(tmp_path):
    ref = small(seed=3, num_classes=5, trainable_backbone_layers=5)
    nn.convert_frozen_batchnorm(ref.backbone.body)
    state = OrderedDict((k, np.asarray(v)) for k, v in ref.state_dict().items())
    v1 = OrderedDict()
    for key, value in state.items():         # the published file's older names
        key = re.sub(r"^(backbone\.fpn\.(inner|layer)_blocks\.\d+)\.0\.", r"\1.", key)
        v1[key.replace("rpn.head.conv.0.0.", "rpn.head.conv.")] = value
    assert "rpn.head.conv.weight" in v1 and "backbone.fpn.inner_blocks.0.weight" in v1
    path = tmp_path / "fasterrcnn_v1.pth"
    v1_file = OrderedDict((k, pth_writer.contiguous(f"s{i}", v)) for i, (k, v)
                          in enumerate(v1.items()))
    v1_file._metadata = OrderedDict([("backbone.fpn", {"version": 1}), ("rpn.head", {"version": 1})])
    pth_writer.write_zip(path, v1_file)
    kwargs = {**SMALL, "num_classes": 5}
    model = zoo.fasterrcnn_resnet18_fpn(**kwargs, weights=str(path))
    assert all(np.array_equal(model.state_dict()[k], v) for k, v in state.items())
    frozen = [m for m in model.modules() if isinstance(m, nn.FrozenBatchNorm2d)]
    assert frozen and all(m.eps == 0.0 for m in frozen)
    # fine-tuning on 2 classes of one's own: everything but the predictor loads
    other = zoo.fasterrcnn_resnet18_fpn(**{**kwargs, "num_classes": 2, "extra_background": True},
                                        weights=str(path))
    assert other.roi_heads.box_predictor.cls_score.out_features == 3
    assert np.array_equal(other.state_dict()["roi_heads.box_head.fc7.weight"],
                          state["roi_heads.box_head.fc7.weight"])
    out = tmp_path / "fasterrcnn.safetensors"          # `tianyuan weights import`
    weights.import_file(str(path), str(out), "fasterrcnn_resnet18_fpn")
    ours = zoo.fasterrcnn_resnet18_fpn(**kwargs, weights=str(out))
    assert all(np.array_equal(ours.state_dict()[k], v) for k, v in state.items())
