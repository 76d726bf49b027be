"""MegEngine Models' detection `.pkl` files -> the zoo's detectors (megengine_detection.py).

The files are synthetic (megengine_detection_reference.py: MegEngine's names, shapes and
layouts from its source, random values), saved as megengine.save writes them, imported like a
downloaded one and loaded into our model with strict key checking.
"""
import math
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import megengine_detection_reference as ref
import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn, weights, zoo
from tianyuan.datasets.coco_categories import COCO_CATEGORIES
from tianyuan.weights import DetectionArchitectureError, convert_state_dict
from tianyuan.weights.cli import main as weights_cli
from tianyuan.weights.megengine_detection import convert_megengine_detection
from tianyuan.weights.megengine_detection_layout import ABSENT_LOGIT, COCO_CATEGORY_IDS
from tianyuan.zoo.detection import (BackboneWithFPN, BoxCoder, LastLevelP6P7, RetinaNet,
                                    rpn_anchor_generator)
from tianyuan.zoo.backbones import get_backbone

SMALL = {"fpn_channels": 64, "min_size": 64, "max_size": 64}
FASTER_SMALL = {**SMALL, "representation_size": 256}
TOOTHBRUSH = COCO_CATEGORY_IDS.index(90)        # MegEngine's class 80 (0-based 79)


def _save(path, state):
    """What megengine.save writes: a pickled OrderedDict of numpy arrays."""
    with open(path, "wb") as handle:
        pickle.dump(OrderedDict(state), handle, protocol=pickle.DEFAULT_PROTOCOL)
    return path


def _faster(gen, seed=0, **kwargs):
    return ref.detector_state("fasterrcnn", gen, depth=18, fpn=64, representation=256,
                              seed=seed, **kwargs)


def _retinanet_c5(num_classes=91):
    """Our RetinaNet on ResNet-18 with P6/P7 from C5 (LastLevelP6P7(512, 64)), as MegEngine's."""
    body = get_backbone("resnet18", frozen_bn=True)
    backbone = BackboneWithFPN(body, ("C3", "C4", "C5"), 64, LastLevelP6P7(512, 64))
    return RetinaNet(backbone, num_classes, min_size=64, max_size=64)


def test_coco_ids_are_the_datasets():
    assert COCO_CATEGORY_IDS == tuple(sorted(COCO_CATEGORIES)) and len(COCO_CATEGORY_IDS) == 80


def test_v05_faster_rcnn_imports_through_the_cli_and_loads_strictly(tmp_path):
    state = _faster("v0.5", seed=1)
    src, out = _save(tmp_path / "faster_rcnn.pkl", state), tmp_path / "faster_rcnn.safetensors"
    assert weights_cli(["import", str(src), "--arch", "fasterrcnn_resnet18_fpn", "--format",
                        "megengine", "--out", str(out)]) == 0
    model = zoo.fasterrcnn_resnet18_fpn(**FASTER_SMALL, weights=str(out))   # strict load
    got = {k: np.asarray(v) for k, v in model.state_dict().items()}
    theirs = {k: v.reshape(-1) if v.ndim == 4 and v.shape[0] == 1 else v for k, v in state.items()}
    assert np.array_equal(got["backbone.body.conv1.weight"],            # BGR -> RGB
                          state["backbone.bottom_up.conv1.weight"][:, ::-1])
    assert np.array_equal(got["backbone.body.layer3.0.bn2.running_var"],
                          theirs["backbone.bottom_up.layer3.0.bn2.running_var"])
    assert np.array_equal(got["backbone.fpn.inner_blocks.1.0.weight"],   # stage 3: level 1
                          state["backbone.fpn_lateral3.weight"])
    assert not got["backbone.fpn.layer_blocks.3.0.bias"].any()          # v0.5: no FPN bias
    assert np.array_equal(got["rpn.head.cls_logits.weight"], state["RPN.rpn_cls_score.weight"][3:])
    assert np.array_equal(got["roi_heads.box_head.fc7.weight"], state["RCNN.fc2.weight"])
    cls_w, cls_b = got["roi_heads.box_predictor.cls_score.weight"], \
        got["roi_heads.box_predictor.cls_score.bias"]
    assert cls_w.shape == (91, 256)
    assert np.array_equal(cls_w[0], state["RCNN.pred_cls.weight"][0])   # the background
    assert np.array_equal(cls_w[90], state["RCNN.pred_cls.weight"][TOOTHBRUSH + 1])
    assert np.array_equal(cls_w[13], state["RCNN.pred_cls.weight"][12])  # stop sign, after a gap
    assert not cls_w[12].any() and cls_b[12] == ABSENT_LOGIT            # no category 12
    delta = got["roi_heads.box_predictor.bbox_pred.weight"].reshape(91, 4, 256)
    assert np.array_equal(delta[90], state["RCNN.pred_delta.weight"].reshape(81, 4, 256)[80])
    # a .pkl given by path with its arch converts the same (format from the name)
    again = weights.load_weights(str(src), arch="fasterrcnn_resnet18_fpn")
    assert all(np.array_equal(again[k], got[k]) for k in again)


def test_v1_faster_rcnn_moves_the_anchor_centres_into_the_rpn_codes():
    state = _faster("v1", seed=2)
    ours = convert_megengine_detection(state, "fasterrcnn_resnet18_fpn")
    assert np.array_equal(ours["rpn.head.cls_logits.weight"], state["rpn.rpn_cls_score.weight"])
    delta = ours["roi_heads.box_predictor.bbox_pred.weight"].reshape(91, 4, 256)
    assert not delta[0].any()                          # v1 has no background deltas
    assert np.array_equal(delta[90], state["rcnn.pred_delta.weight"].reshape(80, 4, 256)[79])
    # their anchor: centred at (i + 0.5) * stride; ours at i * stride. With the square anchor
    # (32 x 32 at stride 4 in both) the decoded boxes agree exactly.
    codes = np.random.default_rng(0).normal(0, 0.3, (1, 12)).astype(np.float32)
    theirs_b, ours_b = state["rpn.rpn_bbox_offsets.bias"].reshape(12), \
        ours["rpn.head.bbox_pred.bias"]
    anchor = rpn_anchor_generator().cell_anchors[0][1:2]           # ratio 1 at P2
    assert anchor.tolist() == [[-16.0, -16.0, 16.0, 16.0]]
    grid = np.array([[12.0, 8.0, 12.0, 8.0]], np.float32)          # x = 3 * 4, y = 2 * 4
    mine = BoxCoder((1, 1, 1, 1)).decode(codes[:, 4:8] + ours_b[4:8], anchor + grid)
    centre = grid[0, :2] + 2.0 + (codes[0, 4:6] + theirs_b[4:6]) * 32
    size = 32 * np.exp(codes[0, 6:8] + theirs_b[6:8])
    np.testing.assert_allclose(mine[0], np.r_[centre - size / 2, centre + size / 2], rtol=1e-5)


def test_syncbn_after_an_fpn_conv_is_folded_into_it():
    state = _faster("v0.5", seed=3, syncbn=True)
    ours = convert_megengine_detection(state, "fasterrcnn_resnet18_fpn")
    x = ty.tensor(np.random.default_rng(1).standard_normal((1, 128, 5, 5)).astype(np.float32))
    p = "backbone.fpn_lateral3."
    theirs = F.batch_norm(F.conv2d(x, ty.tensor(state[p + "weight"])),
                          *(ty.tensor(state[p + "norm." + f].reshape(-1)) for f in
                            ("running_mean", "running_var", "weight", "bias")),
                          training=False, momentum=0.0, eps=1e-5).numpy()
    mine = F.conv2d(x, ty.tensor(ours["backbone.fpn.inner_blocks.1.0.weight"]),
                    ty.tensor(ours["backbone.fpn.inner_blocks.1.0.bias"])).numpy()
    np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)


def test_retinanet_is_refused_where_p6_comes_from_c5(tmp_path, capsys):
    state = ref.detector_state("retinanet", "v0.5", depth=18, fpn=64)
    with pytest.raises(DetectionArchitectureError,
                       match=r"(?s)P6/P7.*C5 \(res5, 512 channels.*from P5 \(64.*bilinear"):
        convert_state_dict(state, "retinanet_resnet18_fpn", "megengine")
    src = _save(tmp_path / "retinanet.pkl", state)
    assert weights_cli(["import", str(src), "--arch", "retinanet_resnet18_fpn",
                        "--out", str(tmp_path / "r.safetensors")]) == 2
    assert "LastLevelP6P7(512, 64)" in capsys.readouterr().err


@pytest.mark.parametrize("gen", ["v0.5", "v1"])
def test_retinanet_loads_into_a_model_with_p6_from_c5(gen):
    ty.manual_seed(0)
    model = _retinanet_c5()
    state = ref.detector_state("retinanet", gen, depth=18, fpn=64, seed=4)
    ours = convert_state_dict(state, "retinanet_resnet18_fpn", "megengine",
                              spec=weights.spec_of(model))
    model.load_state_dict(ours, strict=True)
    cls_w = ours["head.classification_head.cls_logits.weight"].reshape(9, 91, 64, 3, 3)
    cls_b = ours["head.classification_head.cls_logits.bias"].reshape(9, 91)
    theirs_w = state["head.cls_score.weight"].reshape(9, 80, 64, 3, 3)
    ratio, scale = 2, 1                           # ours: ratio-major; v1: scale-major
    a_ours, a_theirs = ratio * 3 + scale, (scale * 3 + ratio if gen == "v1" else ratio * 3 + scale)
    assert np.array_equal(cls_w[a_ours, 90], theirs_w[a_theirs, TOOTHBRUSH])
    assert not cls_w[:, 0].any() and (cls_b[:, [0, 12, 83]] == ABSENT_LOGIT).all()
    box_b = ours["head.regression_head.bbox_reg.bias"].reshape(9, 4)
    theirs_b = state["head.bbox_pred.bias"].reshape(9, 4)
    shift = box_b[a_ours] - theirs_b[a_theirs]
    size = 4 * 2 ** (scale / 3)                   # anchor size / stride
    expected = [math.sqrt(2) / (2 * size), 1 / (2 * size * math.sqrt(2)), 0, 0] \
        if gen == "v1" else [0, 0, 0, 0]
    np.testing.assert_allclose(shift, expected, rtol=1e-5, atol=1e-7)


def test_freeanchor_3x_loads_into_our_retinanet_with_its_codes_scaled(tmp_path):
    state = ref.detector_state("retinanet", "v1", depth=18, fpn=64, seed=7, p6_from="p5")
    src = _save(tmp_path / "freeanchor_res18_coco_3x_800size.pkl", state)
    model = zoo.retinanet_resnet18_fpn(**SMALL, weights=str(src))        # strict load
    got = {k: np.asarray(v) for k, v in model.state_dict().items()}
    assert np.array_equal(got["backbone.fpn.extra_blocks.p6.weight"],
                          state["backbone.top_block.p6.weight"])
    ratio, scale = 0, 2                           # ours a = 2; theirs (scale-major) 6
    box_w = got["head.regression_head.bbox_reg.weight"].reshape(9, 4, 64, 3, 3)
    theirs = state["head.bbox_pred.weight"].reshape(9, 4, 64, 3, 3)
    std = np.array([0.1, 0.1, 0.2, 0.2], np.float32)
    np.testing.assert_allclose(box_w[ratio * 3 + scale], theirs[scale * 3 + ratio]
                               * std[:, None, None, None], rtol=1e-6)
    box_b = got["head.regression_head.bbox_reg.bias"].reshape(9, 4)
    size = 4 * 2 ** (scale / 3)
    expected = state["head.bbox_pred.bias"].reshape(9, 4)[scale * 3 + ratio] * std + [
        math.sqrt(0.5) / (2 * size), 1 / (2 * size * math.sqrt(0.5)), 0, 0]
    np.testing.assert_allclose(box_b[ratio * 3 + scale], expected, rtol=1e-5)


def test_80_classes_keep_megengines_contiguous_layout():
    ty.manual_seed(0)
    faster = zoo.fasterrcnn_resnet18_fpn(**FASTER_SMALL, num_classes=80, extra_background=True)
    nn.convert_frozen_batchnorm(faster.backbone.body)
    state = _faster("v1", seed=5)
    ours = convert_state_dict(state, "fasterrcnn_resnet18_fpn", "megengine",
                              spec=weights.spec_of(faster))
    faster.load_state_dict(ours, strict=True)
    assert np.array_equal(ours["roi_heads.box_predictor.cls_score.weight"],
                          state["rcnn.pred_cls.weight"])
    retinanet = _retinanet_c5(num_classes=80)
    state = ref.detector_state("retinanet", "v0.5", depth=18, fpn=64, seed=6)
    ours = convert_state_dict(state, "retinanet_resnet18_fpn", "megengine", num_classes=80,
                              spec=weights.spec_of(retinanet))
    retinanet.load_state_dict(ours, strict=True)
    assert np.array_equal(ours["head.classification_head.cls_logits.weight"],
                          state["head.cls_score.weight"])


def test_other_detectors_and_misfits_are_refused():
    state = _faster("v1")
    with pytest.raises(DetectionArchitectureError, match="is a Faster R-CNN, not a retinanet"):
        convert_megengine_detection(state, "retinanet_resnet18_fpn")
    fcos = ref.detector_state("retinanet", "v1", depth=18, fpn=64)
    fcos["head.ctrness.weight"] = np.zeros((1, 64, 3, 3), np.float32)
    with pytest.raises(DetectionArchitectureError, match="FCOS / ATSS"):
        convert_megengine_detection(fcos, "retinanet_resnet18_fpn")
    extra = dict(state, **{"rcnn.mask_head.weight": np.zeros((4, 4), np.float32)})
    with pytest.raises(DetectionArchitectureError, match="rcnn.mask_head.weight"):
        convert_megengine_detection(extra, "fasterrcnn_resnet18_fpn")
    with pytest.raises(weights.NameMapError, match="mis-shaped"):   # an R18 file, R50 model
        ty.manual_seed(0)
        model = zoo.fasterrcnn_resnet50_fpn()
        nn.convert_frozen_batchnorm(model.backbone.body)
        convert_state_dict(state, "fasterrcnn_resnet50_fpn", "megengine",
                           spec=weights.spec_of(model))


DETECTION_ENTRIES = [e.name for e in weights.list_entries()
                     if e.format == "megengine" and "box_map" in e.metrics]


def test_manifest_has_every_published_file_with_its_ap():
    files = {weights.get_entry(n).file_name: weights.get_entry(n) for n in DETECTION_ENTRIES}
    assert {n.split("_coco")[0] for n in files} == {
        "retinanet_res50", "retinanet_res18", "freeanchor_res50", "freeanchor_res18",
        "faster_rcnn_res50", "faster_rcnn_res18"}
    assert "retinanet_res50_coco_1x_800size_36dot4_b782a619.pkl" in files and len(files) == 12
    for file, entry in files.items():
        ap = float(file.split("_")[-2].replace("dot", "."))     # "36dot4" in the name
        assert entry.metrics == {"box_map": ap} and entry.urls[0].endswith("/weights/" + file)
        assert entry.name_tag == file[-12:-4] and entry.sha256_kind == "none"
        assert entry.label_map == COCO_CATEGORY_IDS
        assert (entry.converter is None) == file.startswith("retinanet"), entry.name
        assert "bilinear" in entry.notes
    assert weights.get_entry("retinanet_resnet50_fpn.coco_megengine_1x").name_tag == "b782a619"
    assert weights.default_entry("fasterrcnn_resnet50_fpn").name.endswith("coco_torchvision")
    with pytest.raises(NotImplementedError, match="P6 from C5"):
        weights.load_weights("retinanet_resnet50_fpn.coco_megengine_1x")


@pytest.mark.parametrize("name", [n for n in DETECTION_ENTRIES
                                  if weights.get_entry(n).converter])
def test_entry_converts_to_the_built_models_names_and_shapes(name):
    entry = weights.get_entry(name)
    gen = "v0.5" if name.endswith(("_1x", "_1x_syncbn")) else "v1"
    family = "retinanet" if entry.arch.startswith("retinanet") else "fasterrcnn"
    state = ref.detector_state(family, gen, depth=int(entry.arch.split("resnet")[1][:2]),
                               syncbn=name.endswith("syncbn"), zeros=True, p6_from="p5")
    ty.manual_seed(0)
    model = zoo.get_model(entry.arch)
    nn.convert_frozen_batchnorm(model.backbone.body)     # as built under weights
    spec = weights.spec_of(model)
    out = convert_state_dict(state, entry.arch, entry.converter, spec=spec)
    assert weights.spec_of(out) == spec
