"""Synthetic MegEngine Models detector state dicts: the names, shapes and layouts their code
gives (official/vision/detection @da3bf2b for "v0.5", @v1.0.0 / @12a30a1 for "v1"; the
backbone official/vision/classification/resnet/model.py), random values.

Layouts (MegEngine's modules): conv weight (O, I, kh, kw), conv bias (1, O, 1, 1); Linear
weight (out, in), bias (out,); BatchNorm / FrozenBatchNorm2d weight and bias (C,), running
statistics (1, C, 1, 1); Sequential children "0", "1", ...

>>> state = detector_state("fasterrcnn", "v0.5", depth=18, fpn=64, representation=256)
>>> state["RPN.rpn_cls_score.weight"].shape, state["RCNN.pred_delta.weight"].shape
((6, 64, 1, 1), (324, 256))
"""
from collections import OrderedDict

import numpy as np

NUM_CLASSES = 80
ANCHORS = {"retinanet": 9, "fasterrcnn": 3}
# ResNet depth -> (block expansion, blocks per stage)
RESNETS = {18: (1, (2, 2, 2, 2)), 50: (4, (3, 4, 6, 3))}


class _Writer:
    def __init__(self, seed, zeros):
        self.rng, self.zeros, self.state = np.random.default_rng(seed), zeros, OrderedDict()

    def array(self, name, shape, positive=False):
        if self.zeros:
            value = np.ones(shape, np.float32) if positive else np.zeros(shape, np.float32)
        else:
            value = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)
            value = np.abs(value) + np.float32(0.5) if positive else value
        self.state[name] = value

    def conv(self, name, out_ch, in_ch, k, bias=True):
        self.array(name + ".weight", (out_ch, in_ch, k, k))
        if bias:
            self.array(name + ".bias", (1, out_ch, 1, 1))

    def bn(self, name, ch):
        self.array(name + ".weight", (ch,))
        self.array(name + ".bias", (ch,))
        self.array(name + ".running_mean", (1, ch, 1, 1))
        self.array(name + ".running_var", (1, ch, 1, 1), positive=True)

    def linear(self, name, out_f, in_f):
        self.array(name + ".weight", (out_f, in_f))
        self.array(name + ".bias", (out_f,))


def _resnet(w, depth, keep_fc):
    """bottom_up: torchvision's ResNet names; returns the stages' output channels."""
    expansion, blocks = RESNETS[depth]
    p = "backbone.bottom_up."
    w.conv(p + "conv1", 64, 3, 7, bias=False)
    w.bn(p + "bn1", 64)
    in_ch, outs = 64, []
    for stage, count in enumerate(blocks):
        width = 64 * 2 ** stage
        for i in range(count):
            name = f"{p}layer{stage + 1}.{i}."
            if expansion == 1:
                convs = [(width, in_ch, 3), (width, width, 3)]
            else:
                convs = [(width, in_ch, 1), (width, width, 3), (width * 4, width, 1)]
            for j, (o, c, k) in enumerate(convs):
                w.conv(f"{name}conv{j + 1}", o, c, k, bias=False)
                w.bn(f"{name}bn{j + 1}", o)
            if i == 0 and (stage > 0 or in_ch != width * expansion):
                w.conv(name + "downsample.0", width * expansion, in_ch, 1, bias=False)
                w.bn(name + "downsample.1", width * expansion)
            in_ch = width * expansion
        outs.append(in_ch)
    if keep_fc:     # the v0.5 detectors did not delete the ImageNet classifier
        w.linear(p + "fc", 1000, in_ch)
    return outs


def _fpn(w, stages, channels, fpn, gen, syncbn):
    """fpn_lateral{s} (1x1) and fpn_output{s} (3x3): v0.5 has no bias (`use_bias = norm ==
    ""` with norm None), SyncBN configs a `.norm` and no bias, v1 a bias."""
    for stage, ch in zip(stages, channels):
        for name, c_in, k in (("fpn_lateral", ch, 1), ("fpn_output", fpn, 3)):
            prefix = f"backbone.{name}{stage}"
            w.conv(prefix, fpn, c_in, k, bias=gen != "v0.5" and not syncbn)
            if syncbn:
                w.bn(prefix + ".norm", fpn)


def _retinanet(w, c5, fpn, classes, p6_from):
    """RetinaNet's P6 convolves C5 (res5) in every config, FreeAnchor 3x's P5."""
    w.conv("backbone.top_block.p6", fpn, c5 if p6_from == "c5" else fpn, 3)
    w.conv("backbone.top_block.p7", fpn, fpn, 3)
    for tower in ("cls_subnet", "bbox_subnet"):
        for index in (0, 2, 4, 6):                     # (conv, ReLU) x 4
            w.conv(f"head.{tower}.{index}", fpn, fpn, 3)
    w.conv("head.cls_score", ANCHORS["retinanet"] * classes, fpn, 3)
    w.conv("head.bbox_pred", ANCHORS["retinanet"] * 4, fpn, 3)


def _faster_rcnn(w, gen, fpn, representation, classes):
    rpn, rcnn = ("RPN.", "RCNN.") if gen == "v0.5" else ("rpn.", "rcnn.")
    anchors = ANCHORS["fasterrcnn"]
    w.conv(rpn + "rpn_conv", fpn, fpn, 3)
    w.conv(rpn + "rpn_cls_score", anchors * (2 if gen == "v0.5" else 1), fpn, 1)
    w.conv(rpn + "rpn_bbox_offsets", anchors * 4, fpn, 1)
    w.linear(rcnn + "fc1", representation, fpn * 7 * 7)
    w.linear(rcnn + "fc2", representation, representation)
    w.linear(rcnn + "pred_cls", classes + 1, representation)
    w.linear(rcnn + "pred_delta", (classes + (gen == "v0.5")) * 4, representation)


def detector_state(family, gen, depth=18, fpn=256, representation=1024, syncbn=False,
                   classes=NUM_CLASSES, seed=0, zeros=False, p6_from="c5"):
    """A MegEngine RetinaNet / Faster R-CNN state dict (`gen` "v0.5" or "v1"; a FreeAnchor 3x
    file is a v1 RetinaNet's with `p6_from="p5"`); `zeros`: no random draws (only the names
    and shapes matter)."""
    w = _Writer(seed, zeros)
    channels = _resnet(w, depth, keep_fc=gen == "v0.5")
    if family == "retinanet":
        _fpn(w, (3, 4, 5), channels[1:], fpn, gen, syncbn)
        _retinanet(w, channels[-1], fpn, classes, p6_from)
    else:
        _fpn(w, (2, 3, 4, 5), channels, fpn, gen, syncbn)
        _faster_rcnn(w, gen, fpn, representation, classes)
    return w.state
