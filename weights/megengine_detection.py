"""MegEngine Models' detectors (official/vision/detection) -> the zoo's RetinaNet and Faster
R-CNN (torchvision's names), for the files in the manifest and any such `.pkl`.

Read from MegEngine/Models at the commits that published the files (weights/README.md): the
July 2020 code ("v0.5", @da3bf2b4), the Models 1.0 code (tag v1.0.0, @1f6ad9c8) and the 3x
code (@12a30a10). Their state dicts:

    backbone.bottom_up.*                    ResNet (torchvision's names; FrozenBN or SyncBN,
                                            BN statistics (1, C, 1, 1); v0.5 keeps `fc`)
    backbone.fpn_lateral{s} / fpn_output{s} 1x1 / 3x3 convs of stage s (v0.5: no bias; SyncBN
                                            configs: a `.norm` BatchNorm after each, no bias)
    backbone.top_block.p6 / p7              extra levels, from C5 (RetinaNet, FreeAnchor 1x) or P5
                                            (FreeAnchor 3x)
    head.cls_subnet.{0,2,4,6}, cls_score    RetinaNet / FreeAnchor: 4 x (3x3 conv, ReLU),
                                            A * 80 logits
    head.bbox_subnet.{0,2,4,6}, bbox_pred   A * 4 box codes
    RPN.* (v0.5) / rpn.*                    rpn_conv, rpn_cls_score (v0.5: 2A, bg then fg;
                                            later A), rpn_bbox_offsets (A * 4)
    RCNN.* (v0.5) / rcnn.*                  fc1, fc2 (1024), pred_cls (81: background 0, then
                                            the 80 classes), pred_delta (v0.5 81 * 4, later 80 * 4)

What the map does, each step exact for the network as MegEngine runs it at test time:

* names to ours; MegEngine's array shapes undone (name_maps.megengine_layout); `fc` dropped;
* conv1's input channels reversed: MegEngine feeds BGR 0..255 normalised by its configs'
  img_mean / img_std, which are ImageNet's statistics at 0..255 in BGR order (the
  `preprocessing.MEGENGINE` preset), so the model then takes our RGB [0, 1] input with the
  zoo's own normalisation;
* FPN convs without a bias get a zero bias; a SyncBN after an FPN conv is folded into it;
* v0.5's two-way RPN score: its test code ranks proposals by the foreground logit alone
  (no softmax), so that row becomes our objectness logit;
* classes: MegEngine's 80 contiguous classes (Faster R-CNN: after a background column 0)
  go to torchvision's 91-way layout whose index is the COCO category id
  (`COCO_CATEGORY_IDS`; the manifest records it as `label_map`). The 11 ids that are no
  class (0 for RetinaNet, the 10 gaps) get weight 0 and bias `ABSENT_LOGIT`: RetinaNet's
  sigmoid gives 2e-9 there (never above a score threshold); in Faster R-CNN's softmax they
  scale every class score of an RoI by the same factor, above 1 - 3e-8 where the RoI's
  largest logit is >= 0. With `num_classes=80`
  (or a spec of an 80-class model) the contiguous layout is kept instead, which is exact
  (RetinaNet num_classes=80; Faster R-CNN num_classes=80, extra_background=True);
* FreeAnchor's 3x files are RetinaNet's network with P6 from P5, as ours, whose codes its
  box coder multiplies by (0.1, 0.1, 0.2, 0.2): the box rows are scaled by it (ours decode
  with weights 1). They are the MegEngine files our `retinanet_*` builders take;
* anchors: from Models 1.0 on, a location's anchors are scale-major (ours are ratio-major,
  torchvision's): RetinaNet's class and box rows are permuted. Their anchors are centred on
  (i + 0.5) * stride, ours on i * stride; since their anchor sizes are a fixed multiple of the
  stride, the half-stride shift is the same code offset at every level and is added to the
  dx, dy biases (exact up to torchvision's rounding of anchor sizes).

Where the networks differ and no weights are involved, the converted model does not compute
what MegEngine's did (`differences()`, logged on conversion and in the manifest's notes); where
the difference has weights that cannot fit (RetinaNet's P6 from C5 against our P5), the
conversion is refused with `DetectionArchitectureError`.

>>> state = load_megengine("faster_rcnn_res50_coco_1x_800size_38dot8_5e195d80.pkl")
>>> ours = convert_megengine_detection(state, "fasterrcnn_resnet50_fpn")
"""
import logging
import re
from collections import OrderedDict

import numpy as np

from .megengine_detection_layout import (ABSENT_LOGIT, FREEANCHOR_STD,
                                         DetectionArchitectureError, _anchor_order,
                                         _centre_shift, _class_layout, _class_rows)

logger = logging.getLogger("tianyuan.weights")

BN_EPS = 1e-5              # MegEngine's BatchNorm2d default


def is_megengine_detection(state):
    return any(str(k).startswith("backbone.bottom_up.") for k in state)


def family_of(state):
    """"retinanet" or "fasterrcnn" from a MegEngine detector's keys; other heads refused."""
    if "head.ctrness.weight" in state or "head.cls_subnet.1.weight" in state:
        raise DetectionArchitectureError(
            "MegEngine detector: a point head with GroupNorm in its towers (FCOS / ATSS: "
            "`head.ctrness`, `head.cls_subnet.1` a GroupNorm) has no counterpart in the zoo; "
            "only RetinaNet and Faster R-CNN files convert")
    if "head.cls_score.weight" in state:
        return "retinanet"
    if "RPN.rpn_conv.weight" in state or "rpn.rpn_conv.weight" in state:
        return "fasterrcnn"
    raise DetectionArchitectureError(
        "MegEngine detector: neither RetinaNet's `head.cls_score` nor Faster R-CNN's "
        "`rpn.rpn_conv` / `RPN.rpn_conv` is in the file")


def generation(state):
    """"v0.5" (the July 2020 code: the backbone keeps `fc`; Faster R-CNN's `RPN.`/`RCNN.`)
    or "v1" (Models 1.0 and the 3x files)."""
    if "backbone.bottom_up.fc.weight" in state or "RPN.rpn_conv.weight" in state:
        return "v0.5"
    return "v1"


def differences(family, gen):
    """What still differs from MegEngine's network after the map (no weights involved)."""
    out = ["FPN top-down path: MegEngine upsamples the coarser level bilinearly, ours "
           "(torchvision's) by nearest neighbour",
           "image resize: MegEngine resizes the uint8 image with OpenCV before normalising, "
           "ours the normalised float image (bilinear, no antialias)",
           "box decoding: MegEngine does not clamp dw, dh; ours clamps them at log(1000 / 16)"]
    if gen == "v0.5":
        shift = "+1.5 px (base size 4)" if family == "retinanet" else "-0.5 px (offset -0.5)"
        out.append("anchors: MegEngine v0.5's are centred " + shift + " off the grid point, "
                   "one pixel narrower (x2 - x1 = size - 1) and its non-square shapes are "
                   "rounded at the base size (up to 6% larger); ours are torchvision's")
    else:
        out.append("anchors: MegEngine's sizes are not rounded, ours are (torchvision's); "
                   "the half-stride centre offset is absorbed into the box codes")
    if family == "fasterrcnn":
        out.append("RoIAlign: MegEngine pools with aligned=True (half-pixel offset), ours "
                   "with aligned=False (torchvision's MultiScaleRoIAlign)")
    else:
        out.append("test: MegEngine keeps 100 detections per image and no per-level top-k "
                   "(build with detections_per_img=100, topk_candidates large)")
    return out


class _Source:
    """The file's arrays (MegEngine's layout undone); remembers which were used."""

    def __init__(self, state):
        from .name_maps import megengine_layout   # (name_maps imports this module)
        self.arrays = megengine_layout(OrderedDict(
            (k, np.asarray(v)) for k, v in state.items() if isinstance(v, np.ndarray)))
        self.used = set()

    def get(self, key):
        if key not in self.arrays:
            return None
        self.used.add(key)
        return self.arrays[key]

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise DetectionArchitectureError(f"MegEngine detector: the file has no {key!r}")
        return value

    def keys(self, prefix):
        return [k for k in self.arrays if k.startswith(prefix)]

    def leftovers(self):
        return [k for k in self.arrays if k not in self.used]


def convert_megengine_detection(state, arch, num_classes=None, spec=None):
    """A MegEngine RetinaNet / Faster R-CNN state dict -> our names for `arch` (a
    `retinanet_*` or `fasterrcnn_*` builder). `spec` (the target model's, `spec_of(model)`)
    or `num_classes` (91 or 80) choose the class layout (default 91: COCO ids). Raises
    DetectionArchitectureError where the architectures cannot agree."""
    family = family_of(state)
    if not str(arch).startswith("retinanet_" if family == "retinanet" else "fasterrcnn_"):
        raise DetectionArchitectureError(
            f"MegEngine detector: the file is a {family_name(family)}, not a {arch}")
    gen, source = generation(state), _Source(state)
    columns = _class_layout(family, num_classes, spec)
    out = OrderedDict()
    _backbone(source, out)
    _fpn(source, out)
    if family == "retinanet":
        _retinanet_head(source, out, gen, columns, _box_std(source, out, arch, gen, spec))
    else:
        _rpn(source, out, gen)
        _box_head(source, out, gen, columns)
    leftovers = [k for k in source.leftovers() if not k.startswith("backbone.bottom_up.fc.")]
    if leftovers:
        raise DetectionArchitectureError(
            f"MegEngine {family_name(family)} -> {arch}: the file has tensors no part of ours "
            f"holds: {leftovers[:20]}")
    logger.warning("MegEngine %s weights -> %s (%s code): mapped; what still differs from "
                   "MegEngine's network: %s", family_name(family), arch, gen,
                   "; ".join(differences(family, gen)))
    return out


def family_name(family):
    return "RetinaNet" if family == "retinanet" else "Faster R-CNN"


# ---------------------------------------------------------------- the parts

def _backbone(source, out):
    """bottom_up -> body; conv1 takes RGB (their BGR channels reversed)."""
    for key in source.keys("backbone.bottom_up."):
        if key.startswith("backbone.bottom_up.fc."):
            continue                      # v0.5 keeps the ImageNet classifier; unused
        value = source[key]
        if key == "backbone.bottom_up.conv1.weight":
            value = np.ascontiguousarray(value[:, ::-1])    # (O, BGR, 7, 7) -> (O, RGB, 7, 7)
        out["backbone.body." + key[len("backbone.bottom_up."):]] = value


def _conv_with_norm(source, prefix):
    """(weight, bias) of the conv at `prefix`: a zero bias where it has none, its `.norm`
    BatchNorm (SyncBN configs) folded in (eval: y = (x - mean) / sqrt(var + eps) * g + b)."""
    weight, bias = source[prefix + ".weight"], source.get(prefix + ".bias")
    bias = np.zeros(weight.shape[0], weight.dtype) if bias is None else bias
    gamma = source.get(prefix + ".norm.weight")
    if gamma is None:
        return weight, bias
    beta, mean, var = (source[f"{prefix}.norm.{f}"] for f in ("bias", "running_mean",
                                                              "running_var"))
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + BN_EPS)
    return ((weight * scale[:, None, None, None]).astype(weight.dtype),
            (beta + (bias - mean) * scale).astype(weight.dtype))


def _fpn(source, out):
    """fpn_lateral{s} / fpn_output{s} -> inner_blocks / layer_blocks, finest stage first;
    top_block.p6 / p7 -> extra_blocks."""
    stages = sorted(int(m.group(1)) for m in
                    (re.match(r"backbone\.fpn_lateral(\d+)\.weight$", k) for k in source.arrays)
                    if m)
    for i, stage in enumerate(stages):
        for theirs, ours in (("fpn_lateral", "inner_blocks"), ("fpn_output", "layer_blocks")):
            weight, bias = _conv_with_norm(source, f"backbone.{theirs}{stage}")
            out[f"backbone.fpn.{ours}.{i}.0.weight"] = weight
            out[f"backbone.fpn.{ours}.{i}.0.bias"] = bias
    for name in ("p6", "p7"):
        for field in ("weight", "bias"):
            value = source.get(f"backbone.top_block.{name}.{field}")
            if value is not None:
                out[f"backbone.fpn.extra_blocks.{name}.{field}"] = value


def _box_std(source, out, arch, gen, spec):
    """The std MegEngine's box coder multiplies this head's codes by. Its RetinaNet convolves
    P6 from C5 in every config; ours (the registered builders, torchvision's v1) from P5:
    refused unless `spec` is a model built with P6 from C5 (then std 1, RetinaNet's). P6 from
    P5 is FreeAnchor's 3x configs: RetinaNet's network, codes scaled by FREEANCHOR_STD."""
    p6 = source["backbone.top_block.p6.weight"]
    fpn_out = out["backbone.fpn.layer_blocks.0.0.weight"].shape[0]
    wanted = None if spec is None else spec.get("backbone.fpn.extra_blocks.p6.weight")
    if (wanted is None or tuple(wanted[0]) == p6.shape) and p6.shape[1] == fpn_out:
        return FREEANCHOR_STD
    if wanted is not None and tuple(wanted[0]) == p6.shape:
        return (1.0, 1.0, 1.0, 1.0)
    if p6.shape[1] == fpn_out:          # FreeAnchor's P6 from P5 against a C5 model
        raise DetectionArchitectureError(
            f"MegEngine FreeAnchor -> {arch}: its P6 convolves P5 (p6 weight {p6.shape}), the "
            f"model's takes {tuple(wanted[0])}; build the RetinaNet with P6 from P5")
    ours = (f"the model's p6 weight is {tuple(wanted[0])}" if wanted is not None else
            f"{arch} builds P6 from P5 ({fpn_out} channels; torchvision's v1 LastLevelP6P7)")
    raise DetectionArchitectureError(
        f"MegEngine RetinaNet -> {arch}: the architectures differ where there are weights, so "
        "no mapping makes ours compute theirs:\n"
        f"  * P6/P7: MegEngine's top block convolves C5 (res5, {p6.shape[1]} channels; p6 "
        f"weight {p6.shape}); {ours}.\n"
        "Everything else maps (names, conv1 to RGB, FPN biases, classes to COCO ids, anchor "
        f"order). A RetinaNet whose FPN ends in LastLevelP6P7({p6.shape[1]}, {fpn_out}) (P6 "
        "from C5, as torchvision's v2) takes these weights: pass its spec "
        "(weights.spec_of(model)); a FreeAnchor 1x/2x file (Models 1.2; the same names, P6 "
        f"from C5) decodes with std {FREEANCHOR_STD}, which the file does not say: scale "
        "bbox_reg's rows by it. Without weights but still different: "
        + "; ".join(differences("retinanet", gen)))


def _retinanet_head(source, out, gen, columns, box_std):
    for theirs, ours in (("cls_subnet", "classification_head"), ("bbox_subnet", "regression_head")):
        layers = sorted({int(k.split(".")[2]) for k in source.keys(f"head.{theirs}.")})
        if layers != [0, 2, 4, 6]:
            raise DetectionArchitectureError(
                f"MegEngine RetinaNet: head.{theirs} has parameters at {layers}; ours is four "
                "(3x3 conv, ReLU) pairs, the convs at 0, 2, 4, 6")
        for k, layer in enumerate(layers):
            for field in ("weight", "bias"):
                out[f"head.{ours}.conv.{k}.0.{field}"] = source[f"head.{theirs}.{layer}.{field}"]
    box_w, box_b = source["head.bbox_pred.weight"], source["head.bbox_pred.bias"]
    anchors = box_w.shape[0] // 4
    order = _anchor_order(gen, anchors)
    cls_w, cls_b = source["head.cls_score.weight"], source["head.cls_score.bias"]
    k = cls_w.shape[0] // anchors                   # rows a * K + k, as ours
    cls_w = cls_w.reshape((anchors, k) + cls_w.shape[1:])[order]
    cls_b = cls_b.reshape(anchors, k)[order]
    cls_w = np.moveaxis(_class_rows(np.moveaxis(cls_w, 1, 0), columns, False, 0.0), 0, 1)
    cls_b = _class_rows(cls_b.T, columns, False, ABSENT_LOGIT).T
    out["head.classification_head.cls_logits.weight"] = np.ascontiguousarray(
        cls_w.reshape((-1,) + cls_w.shape[2:]))
    out["head.classification_head.cls_logits.bias"] = np.ascontiguousarray(cls_b.reshape(-1))
    std = np.asarray(box_std, box_w.dtype)          # their decode: codes * std
    box_w = box_w.reshape((anchors, 4) + box_w.shape[1:])[order] * std[:, None, None, None]
    box_b = box_b.reshape(anchors, 4)[order] * std
    if gen != "v0.5":
        box_b = (box_b + _centre_shift("retinanet", anchors)).astype(box_b.dtype)
    out["head.regression_head.bbox_reg.weight"] = box_w.reshape((-1,) + box_w.shape[2:])
    out["head.regression_head.bbox_reg.bias"] = box_b.reshape(-1)


def _rpn(source, out, gen):
    prefix = "RPN." if gen == "v0.5" else "rpn."
    out["rpn.head.conv.0.0.weight"] = source[prefix + "rpn_conv.weight"]
    out["rpn.head.conv.0.0.bias"] = source[prefix + "rpn_conv.bias"]
    box_w = source[prefix + "rpn_bbox_offsets.weight"]
    box_b = source[prefix + "rpn_bbox_offsets.bias"]
    anchors = box_w.shape[0] // 4                   # channels a * 4 + c, as ours
    cls_w, cls_b = source[prefix + "rpn_cls_score.weight"], source[prefix + "rpn_cls_score.bias"]
    if cls_w.shape[0] == 2 * anchors:   # v0.5: (bg, fg) x A; its test ranks by fg alone
        cls_w, cls_b = cls_w[anchors:], cls_b[anchors:]
    elif cls_w.shape[0] != anchors:
        raise DetectionArchitectureError(
            f"MegEngine Faster R-CNN: rpn_cls_score has {cls_w.shape[0]} channels for "
            f"{anchors} anchors (expected {anchors} or {2 * anchors})")
    out["rpn.head.cls_logits.weight"], out["rpn.head.cls_logits.bias"] = cls_w, cls_b
    if gen != "v0.5":
        shift = _centre_shift("fasterrcnn", anchors).reshape(-1)
        box_b = (box_b + shift).astype(box_b.dtype)
    out["rpn.head.bbox_pred.weight"], out["rpn.head.bbox_pred.bias"] = box_w, box_b


def _box_head(source, out, gen, columns):
    prefix = "RCNN." if gen == "v0.5" else "rcnn."
    for theirs, ours in (("fc1", "fc6"), ("fc2", "fc7")):
        for field in ("weight", "bias"):
            out[f"roi_heads.box_head.{ours}.{field}"] = source[f"{prefix}{theirs}.{field}"]
    cls_w, cls_b = source[prefix + "pred_cls.weight"], source[prefix + "pred_cls.bias"]
    delta_w, delta_b = source[prefix + "pred_delta.weight"], source[prefix + "pred_delta.bias"]
    delta_w = delta_w.reshape(-1, 4, delta_w.shape[1])               # (classes, 4, D)
    delta_b = delta_b.reshape(-1, 4)
    if delta_w.shape[0] == cls_w.shape[0] - 1:      # Models 1.0+: no background deltas
        delta_w = np.concatenate([np.zeros_like(delta_w[:1]), delta_w])
        delta_b = np.concatenate([np.zeros_like(delta_b[:1]), delta_b])
    predictor = "roi_heads.box_predictor."
    out[predictor + "cls_score.weight"] = _class_rows(cls_w, columns, True, 0.0)
    out[predictor + "cls_score.bias"] = _class_rows(cls_b, columns, True, ABSENT_LOGIT)
    out[predictor + "bbox_pred.weight"] = _class_rows(delta_w, columns, True, 0.0).reshape(
        -1, delta_w.shape[2])
    out[predictor + "bbox_pred.bias"] = _class_rows(delta_b, columns, True, 0.0).reshape(-1)
