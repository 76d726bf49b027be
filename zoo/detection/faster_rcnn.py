"""Faster R-CNN (Ren et al., 1506.01497) with an FPN (Lin et al., 1612.03144), torchvision's
module names, so its published COCO weights load by name.

    backbone.body.*    ResNet stem and stages (FrozenBatchNorm2d under pretrained weights)
    backbone.fpn.*     FPN over C2-C5, with P6 = max_pool(P5) (`LastLevelMaxPool`)
    rpn.head.*         RPNHead (zoo/detection/rpn.py)
    roi_heads.*        box_head.fc6/fc7, box_predictor.cls_score/bbox_pred (roi_heads.py)

The interface is RetinaNet's (what trainers/detection.py, the COCO evaluator and `tianyuan
detect` use): `model(images, targets=None)`; training returns {"loss_objectness",
"loss_rpn_box_reg", "loss_classifier", "loss_box_reg"}, eval a {"boxes", "scores",
"labels"} numpy dict per image in its own pixels. Labels: the box predictor has a background
column 0. With `extra_background=False` (torchvision's layout, its published 91-way head)
the labels are the predictor's columns, so 0 is never a label; with True (a head for data's
contiguous labels) one background column is added in front, labels 0..num_classes-1 being
columns 1..num_classes. Either way `num_classes` is the number of labels.

>>> import numpy as np
>>> from tianyuan.zoo import fasterrcnn_small
>>> model = fasterrcnn_small(num_classes=3, min_size=64, max_size=64).eval()
>>> sorted(model([np.random.rand(3, 60, 80).astype(np.float32)])[0])
['boxes', 'labels', 'scores']
"""
from functools import partial

import numpy as np

from tianyuan import nn
from tianyuan.autograd import no_grad
from tianyuan.tensor import Tensor
from tianyuan.weights.preprocessing import IMAGENET_MEAN, IMAGENET_STD, TORCHVISION_DETECTION

from ..backbones import freeze_stages, get_backbone
from ..registry import register_model
from .anchors import AnchorGenerator
from .common import detection_card, load_detection_weights
from .fpn import BackboneWithFPN, LastLevelMaxPool
from .retinanet import _check_target
from .roi_heads import FastRCNNPredictor, RoIHeads, TwoMLPHead
from .rpn import RegionProposalNetwork, RPNHead
from .transform import GeneralizedRCNNTransform


def rpn_anchor_generator(sizes=(32, 64, 128, 256, 512), aspect_ratios=(0.5, 1.0, 2.0)):
    """One size per level (P2-P6) x three aspect ratios (torchvision's _default_anchorgen)."""
    return AnchorGenerator(tuple((s,) for s in sizes), (tuple(aspect_ratios),) * len(sizes))


class FasterRCNN(nn.Module):
    """Faster R-CNN over `backbone` (images -> pyramid levels, finest first, with
    `out_channels`). Defaults are torchvision's (REFERENCE.md 1f); rpn_* and box_* as its
    FasterRCNN's arguments."""

    def __init__(self, backbone, num_classes, min_size=800, max_size=1333, image_mean=None,
                 image_std=None, extra_background=False, rpn_anchor_sizes=(32, 64, 128, 256, 512),
                 rpn_pre_nms_top_n_train=2000, rpn_pre_nms_top_n_test=1000,
                 rpn_post_nms_top_n_train=2000, rpn_post_nms_top_n_test=1000,
                 rpn_nms_thresh=0.7, rpn_fg_iou_thresh=0.7, rpn_bg_iou_thresh=0.3,
                 rpn_batch_size_per_image=256, rpn_positive_fraction=0.5,
                 box_score_thresh=0.05, box_nms_thresh=0.5, box_detections_per_img=100,
                 box_fg_iou_thresh=0.5, box_bg_iou_thresh=0.5, box_batch_size_per_image=512,
                 box_positive_fraction=0.25, representation_size=1024, sampling_ratio=2):
        super().__init__()
        self.num_classes, self.extra_background = int(num_classes), bool(extra_background)
        columns = self.num_classes + int(self.extra_background)
        self.transform = GeneralizedRCNNTransform(min_size, max_size, image_mean or IMAGENET_MEAN,
                                                  image_std or IMAGENET_STD)
        # int8 (quantize_qat / quantize): backbone, FPN, the RPN's convolutions and the box
        # head's two layers and predictor; RoIAlign, box decoding and NMS stay float
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        self.backbone = backbone
        anchors = rpn_anchor_generator(rpn_anchor_sizes)
        self.rpn = RegionProposalNetwork(
            anchors, RPNHead(backbone.out_channels, anchors.num_anchors_per_location()[0]),
            rpn_fg_iou_thresh, rpn_bg_iou_thresh, rpn_batch_size_per_image,
            rpn_positive_fraction,
            {"training": rpn_pre_nms_top_n_train, "testing": rpn_pre_nms_top_n_test},
            {"training": rpn_post_nms_top_n_train, "testing": rpn_post_nms_top_n_test},
            rpn_nms_thresh)
        self.roi_heads = RoIHeads(
            nn.MultiScaleRoIAlign(["0", "1", "2", "3"], 7, sampling_ratio),
            TwoMLPHead(backbone.out_channels * 7 * 7, representation_size),
            FastRCNNPredictor(representation_size, columns),
            box_fg_iou_thresh, box_bg_iou_thresh, box_batch_size_per_image,
            box_positive_fraction, (10.0, 10.0, 5.0, 5.0), box_score_thresh, box_nms_thresh,
            box_detections_per_img)

    two_stage = True    # run_network's outputs are over its own proposals (tianyuan quantize)

    @property
    def score_thresh(self):       # `tianyuan detect ... model.score_thresh=` as RetinaNet's
        return self.roi_heads.score_thresh

    @score_thresh.setter
    def score_thresh(self, value):
        self.roi_heads.score_thresh = value

    def forward(self, images, targets=None):
        """Training: the four losses; eval: a detections dict per image."""
        if self.training and targets is None:
            raise ValueError("FasterRCNN: training mode needs targets (a list of {'boxes', "
                             "'labels'} per image); call model.eval() for detections")
        if targets is not None:
            targets = [self._columns(_check_target(t, i, self.num_classes), i)
                       for i, t in enumerate(targets)]
        if self.training:
            return self._forward(images, targets)
        with no_grad():
            return self._forward(images, targets)

    def _columns(self, target, index):
        """A target's labels as class columns (column 0 is the background)."""
        labels = target["labels"]
        if self.extra_background:
            return dict(target, labels=labels + 1)
        if labels.size and labels.min() == 0:
            raise ValueError(f"FasterRCNN: target {index}: label 0 is the background column "
                             "of this head (torchvision's layout); build the model with "
                             "extra_background=True for 0-based labels")
        return target

    def _forward(self, images, targets):
        original_sizes = [tuple(im.shape[-2:]) for im in images]
        batch, sizes, targets = self.transform(images, targets)
        features = self.backbone(self.quant(Tensor(batch)))
        proposals, losses = self.rpn(batch.shape[-2:], sizes, features, targets)
        features = [self.dequant(f) for f in features]        # RoIAlign reads float
        found = self.roi_heads(features, proposals, sizes, targets)
        if self.training:
            return {**losses, **found}
        if self.extra_background:
            for det in found:
                det["labels"] = det["labels"] - 1
        return self.transform.postprocess(found, sizes, original_sizes)

    def run_network(self, batch):
        """(N, 3, H, W) normalised padded batch -> the box predictor's class logits and box
        codes over the RPN's proposals: every layer int8 runs (backbone, FPN, RPN head, box
        head), without the final decoding and NMS (what `tianyuan quantize` times)."""
        sizes = [tuple(batch.shape[-2:])] * batch.shape[0]
        with no_grad():
            features = self.backbone(self.quant(batch))
            proposals, _ = self.rpn(batch.shape[-2:], sizes, features)
            features = [self.dequant(f) for f in features]
            heads = self.roi_heads
            return heads.box_predictor(heads.box_head(heads.box_roi_pool(features, proposals,
                                                                         sizes)))

    def fuse_groups(self):
        groups = [[f"backbone.{name}" for name in group]
                  for group in self.backbone.fuse_groups()]
        return groups + [["rpn.head.conv.0.0", "rpn.head.conv.0.1"],
                         ["roi_heads.box_head.fc6", "roi_heads.box_head.relu6"],
                         ["roi_heads.box_head.fc7", "roi_heads.box_head.relu7"]]


# ---------------------------------------------------------------- builders

_HEAD_KEYS = ("roi_heads.box_predictor.cls_score.weight", "roi_heads.box_predictor.cls_score.bias",
              "roi_heads.box_predictor.bbox_pred.weight", "roi_heads.box_predictor.bbox_pred.bias")


def _fasterrcnn(arch, backbone_arch, *, num_classes=91, weights=None, pretrained_backbone=False,
                trainable_backbone_layers=None, fpn_channels=256, **kwargs):
    """Faster R-CNN on `backbone_arch`'s C2-C5 (torchvision's fasterrcnn_resnet50_fpn).
    weights / pretrained_backbone / trainable_backbone_layers as RetinaNet's builder (a
    weights file's class head of another size is left new). kwargs: FasterRCNN's."""
    pretrained_backbone = pretrained_backbone and weights is None
    trained = weights is not None or pretrained_backbone
    trainable = 3 if trained else 5
    if trainable_backbone_layers is not None:
        trainable = int(trainable_backbone_layers)
    if not 0 <= trainable <= 5:
        raise ValueError(f"{arch}: trainable_backbone_layers must be 0 to 5, got {trainable}")
    body = get_backbone(backbone_arch, pretrained=pretrained_backbone, frozen_bn=trained)
    if trainable < 5:
        freeze_stages(body, 4 - trainable)
    backbone = BackboneWithFPN(body, ("C2", "C3", "C4", "C5"), fpn_channels, LastLevelMaxPool())
    model = FasterRCNN(backbone, num_classes, **kwargs)
    if weights is not None:
        load_detection_weights(model, arch, weights, _HEAD_KEYS)
    return model


def _register(arch, backbone_arch, card=None, **defaults):
    return register_model(arch, partial(_fasterrcnn, arch, backbone_arch, **defaults),
                          detection_card(backbone=backbone_arch, **(card or {})))


fasterrcnn_resnet50_fpn = _register("fasterrcnn_resnet50_fpn", "resnet50")
# ResNet-18's C2-C5 (64/128/256/512 channels), torchvision's other defaults
fasterrcnn_resnet18_fpn = _register("fasterrcnn_resnet18_fpn", "resnet18")
# the smoke recipes' detector, not a paper variant: fasterrcnn_resnet18_fpn with a 64-channel
# FPN, a 256-wide box head, fewer proposals and samples for 128-pixel images, a head for the
# data's contiguous labels (every default can be overridden)
_SMALL = {"fpn_channels": 64, "min_size": 128, "max_size": 128, "representation_size": 256,
          "extra_background": True, "rpn_pre_nms_top_n_train": 600,
          "rpn_post_nms_top_n_train": 300, "rpn_pre_nms_top_n_test": 300,
          "rpn_post_nms_top_n_test": 100, "box_batch_size_per_image": 128}
fasterrcnn_small = _register(
    "fasterrcnn_small", "resnet18",
    {"input_size": (3, 128, 128),
     "preprocessing": dict(TORCHVISION_DETECTION, min_size=128, max_size=128)}, **_SMALL)
