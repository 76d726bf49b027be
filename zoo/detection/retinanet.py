"""RetinaNet (Lin et al., "Focal Loss for Dense Object Detection", 1708.02002) with
torchvision's module names, so its published COCO weights load by name.

    backbone.body.*            ResNet stem and stages (a zoo Backbone; FrozenBatchNorm2d
                               under pretrained weights)
    backbone.fpn.*             FPN over C3-C5, with P6/P7 (`LastLevelP6P7`)
    head.classification_head   conv.{0-3}.0 (3x3 + ReLU), cls_logits (A * K maps)
    head.regression_head       conv.{0-3}.0, bbox_reg (A * 4 maps)

The interface (what trainers/detection.py and the COCO evaluator use):
`model(images, targets=None)`, images a list of (3, H, W) float32 arrays or Tensors in
[0, 1], RGB, sizes free; targets a list of {"boxes": (N, 4) xyxy pixels of that image,
"labels": (N,) int64 class indices < num_classes}. Training returns {"loss_cls",
"loss_box_reg"} (scalar Tensors); eval a list of {"boxes": (K, 4) float32 xyxy in the
original image's pixels, "scores": (K,) float32, "labels": (K,) int64} numpy dicts.

The image transform, anchors, matching, box coding and NMS run in numpy around the network;
the network itself (backbone, FPN, heads) sits between `quant` and `dequant` stubs with its
ReLUs and adds as modules, so quantize_qat takes backbone + FPN + heads and the int8 model
decodes boxes in float from its dequantized head outputs.

>>> import numpy as np
>>> from tianyuan.zoo import retinanet_resnet18_fpn
>>> model = retinanet_resnet18_fpn(num_classes=3, min_size=64, max_size=96).eval()
>>> out = model([np.random.rand(3, 60, 80).astype(np.float32)])
>>> sorted(out[0])
['boxes', 'labels', 'scores']
"""
import math
from functools import partial

import numpy as np

import tianyuan.functional as F
from tianyuan import nn
from tianyuan.autograd import no_grad
from tianyuan.tensor import Tensor
from tianyuan.weights.preprocessing import IMAGENET_MEAN, IMAGENET_STD, TORCHVISION_DETECTION

from ..backbones import freeze_stages, get_backbone
from ..registry import register_model
from .anchors import AnchorGenerator, retinanet_anchor_generator
from .box_coder import BoxCoder
from .common import detection_card, load_detection_weights
from .fpn import BackboneWithFPN, LastLevelP6P7
from .matcher import BETWEEN_THRESHOLDS, Matcher
from .transform import GeneralizedRCNNTransform


def _conv_relu_tower(channels):
    """Four (3x3 conv, ReLU) pairs, each a Sequential: `conv.{k}.0`, `conv.{k}.1`."""
    return nn.Sequential(*[nn.Sequential(nn.Conv2d(channels, channels, 3, 1, 1), nn.ReLU())
                           for _ in range(4)])


def _normal_init(module):
    """torchvision's head init: conv weights N(0, 0.01), biases 0."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)


class RetinaNetClassificationHead(nn.Module):
    """Per level (N, C, H, W) -> (N, A * K, H, W) logits; the convs are shared by the levels.
    cls_logits' bias starts at -log((1 - p) / p): every anchor's prior is p (paper 4.1)."""

    def __init__(self, in_channels, num_anchors, num_classes, prior_probability=0.01):
        super().__init__()
        self.conv = _conv_relu_tower(in_channels)
        self.cls_logits = nn.Conv2d(in_channels, num_anchors * num_classes, 3, 1, 1)
        _normal_init(self)
        nn.init.constant_(self.cls_logits.bias,
                          -math.log((1 - prior_probability) / prior_probability))
        self.num_classes, self.num_anchors = num_classes, num_anchors

    def forward(self, features):
        return [self.cls_logits(self.conv(x)) for x in features]


class RetinaNetRegressionHead(nn.Module):
    """Per level (N, C, H, W) -> (N, A * 4, H, W) box codes (BoxCoder, weights 1)."""

    def __init__(self, in_channels, num_anchors):
        super().__init__()
        self.conv = _conv_relu_tower(in_channels)
        self.bbox_reg = nn.Conv2d(in_channels, num_anchors * 4, 3, 1, 1)
        _normal_init(self)

    def forward(self, features):
        return [self.bbox_reg(self.conv(x)) for x in features]


class RetinaNetHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_classes, prior_probability=0.01):
        super().__init__()
        self.classification_head = RetinaNetClassificationHead(in_channels, num_anchors,
                                                               num_classes, prior_probability)
        self.regression_head = RetinaNetRegressionHead(in_channels, num_anchors)

    def forward(self, features):
        """([logits per level], [box codes per level])."""
        return self.classification_head(features), self.regression_head(features)

    def fuse_groups(self, prefix="head"):
        return [[f"{prefix}.{branch}.conv.{k}.0", f"{prefix}.{branch}.conv.{k}.1"]
                for branch in ("classification_head", "regression_head") for k in range(4)]


def flatten_levels(maps, width):
    """[(N, A * width, H, W)] -> (N, sum of H * W * A, width): position-major, then anchor,
    the anchors' order (a Tensor composition, so gradients flow)."""
    out = []
    for m in maps:
        n, c, h, w = m.shape
        m = F.reshape(m, n, c // width, width, h, w)           # (N, A, width, H, W)
        out.append(F.reshape(F.permute(m, 0, 3, 4, 1, 2), n, h * w * (c // width), width))
    return out[0] if len(out) == 1 else F.concat(out, axis=1)


class RetinaNet(nn.Module):
    """RetinaNet over `backbone` (a module mapping the image batch to its pyramid levels, with
    `out_channels`). Defaults are torchvision's (REFERENCE.md 1f): anchors 32-512 x 3 scales
    x 3 ratios, matching at IoU 0.5 / 0.4 with low-quality matches, focal loss (alpha 0.25,
    gamma 2) and L1 box loss, each over the foreground count; at test time scores > 0.05, the
    top 1000 per level, class-wise NMS at 0.5 and 300 detections per image."""

    def __init__(self, backbone, num_classes, min_size=800, max_size=1333, image_mean=None,
                 image_std=None, anchor_generator=None, head=None, score_thresh=0.05,
                 nms_thresh=0.5, detections_per_img=300, fg_iou_thresh=0.5, bg_iou_thresh=0.4,
                 topk_candidates=1000, focal_alpha=0.25, focal_gamma=2.0):
        super().__init__()
        self.num_classes = int(num_classes)
        self.transform = GeneralizedRCNNTransform(min_size, max_size,
                                                  image_mean or IMAGENET_MEAN,
                                                  image_std or IMAGENET_STD)
        self.quant = nn.QuantStub()
        self.backbone = backbone
        if anchor_generator is None:
            anchor_generator = retinanet_anchor_generator()
        self.anchor_generator = anchor_generator
        if not isinstance(self.anchor_generator, AnchorGenerator):
            raise TypeError("RetinaNet: anchor_generator must be an AnchorGenerator, got "
                            f"{type(self.anchor_generator).__name__}")
        num_anchors = self.anchor_generator.num_anchors_per_location()[0]
        if head is None:
            head = RetinaNetHead(backbone.out_channels, num_anchors, self.num_classes)
        self.head = head
        self.dequant = nn.DequantStub()
        self.proposal_matcher = Matcher(fg_iou_thresh, bg_iou_thresh,
                                        allow_low_quality_matches=True)
        self.box_coder = BoxCoder((1.0, 1.0, 1.0, 1.0))
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.detections_per_img, self.topk_candidates = detections_per_img, topk_candidates
        self.focal_alpha, self.focal_gamma = focal_alpha, focal_gamma

    # ------------------------------------------------------------ forward

    def forward(self, images, targets=None):
        """Training: {"loss_cls", "loss_box_reg"}; eval: a detections dict per image."""
        if self.training and targets is None:
            raise ValueError("RetinaNet: training mode needs targets (a list of {'boxes', "
                             "'labels'} per image); call model.eval() for detections")
        if targets is not None:
            targets = [_check_target(t, i, self.num_classes) for i, t in enumerate(targets)]
        if self.training:
            return self._forward(images, targets)
        with no_grad():      # eval returns numpy arrays: nothing to differentiate
            return self._forward(images, targets)

    def _forward(self, images, targets):
        original_sizes = [tuple(im.shape[-2:]) for im in images]
        batch, sizes, targets = self.transform(images, targets)
        cls_maps, reg_maps = self.run_network(Tensor(batch))
        grids = [tuple(m.shape[-2:]) for m in cls_maps]
        anchors = self.anchor_generator.per_level(batch.shape[-2:], grids)
        if self.training:
            return self.compute_loss(targets, cls_maps, reg_maps, np.concatenate(anchors))
        detections = self.postprocess_detections(cls_maps, reg_maps, anchors, sizes)
        return self.transform.postprocess(detections, sizes, original_sizes)

    def run_network(self, batch):
        """(N, 3, H, W) normalised padded batch -> per-level logits and box codes, float."""
        features = self.backbone(self.quant(batch))
        cls_maps, reg_maps = self.head(features)
        return [self.dequant(m) for m in cls_maps], [self.dequant(m) for m in reg_maps]

    def fuse_groups(self):
        groups = [[f"backbone.{name}" for name in group]
                  for group in self.backbone.fuse_groups()]
        return groups + self.head.fuse_groups("head")

    # ------------------------------------------------------------ training

    def compute_loss(self, targets, cls_maps, reg_maps, anchors):
        """Focal loss over the anchors not ignored, L1 over the foreground's box codes; each
        image's sums over its foreground count (at least 1), then the mean over images."""
        logits = flatten_levels(cls_maps, self.num_classes)   # (N, A_all, K)
        codes = flatten_levels(reg_maps, 4)                    # (N, A_all, 4)
        onehot, cls_weight, box_targets, box_weight = self.loss_targets(targets, anchors)
        focal = F.sigmoid_focal_loss(logits, Tensor(onehot), self.focal_alpha, self.focal_gamma)
        count = float(len(targets))
        loss_cls = F.sum(focal * Tensor(cls_weight)) / count
        loss_box = F.sum(F.abs(codes - Tensor(box_targets)) * Tensor(box_weight)) / count
        return {"loss_cls": loss_cls, "loss_box_reg": loss_box}

    def loss_targets(self, targets, anchors):
        """numpy: one-hot class targets (N, A, K), their weights (N, A, 1) (0 for ignored
        anchors, else 1 / foreground count), box-code targets (N, A, 4) and their weights
        (N, A, 1) (the foreground's 1 / count, else 0)."""
        n, a = len(targets), anchors.shape[0]
        onehot = np.zeros((n, a, self.num_classes), np.float32)
        cls_weight = np.zeros((n, a, 1), np.float32)
        box_targets = np.zeros((n, a, 4), np.float32)
        box_weight = np.zeros((n, a, 1), np.float32)
        for i, target in enumerate(targets):
            boxes, labels = target["boxes"], target["labels"]
            if boxes.shape[0] == 0:
                matched = np.full(a, Matcher.BELOW_LOW_THRESHOLD, np.int64)
            else:
                matched = self.proposal_matcher(F.box_iou(boxes, anchors).numpy())
            fg = np.flatnonzero(matched >= 0)
            norm = np.float32(1.0 / max(1, fg.size))
            onehot[i, fg, labels[matched[fg]]] = 1.0
            cls_weight[i, :, 0] = (matched != BETWEEN_THRESHOLDS) * norm
            box_targets[i, fg] = self.box_coder.encode(boxes[matched[fg]], anchors[fg])
            box_weight[i, fg, 0] = norm
        return onehot, cls_weight, box_targets, box_weight

    # ------------------------------------------------------------ inference

    def postprocess_detections(self, cls_maps, reg_maps, anchors, image_sizes):
        """Per image: per level the scores above score_thresh, at most topk_candidates of them,
        their boxes decoded and clipped to the (resized) image; then class-wise NMS and the
        best detections_per_img."""
        scores = [_layout(F.sigmoid(m).numpy(), self.num_classes) for m in cls_maps]
        codes = [_layout(m.numpy(), 4) for m in reg_maps]
        out = []
        for i, size in enumerate(image_sizes):
            found = [self._level_candidates(s[i], c[i], a, size)
                     for s, c, a in zip(scores, codes, anchors)]
            boxes, kept_scores, labels = (np.concatenate(parts) for parts in zip(*found))
            keep = F.batched_nms(boxes, kept_scores, labels, self.nms_thresh).numpy()
            keep = keep[:self.detections_per_img]
            out.append({"boxes": boxes[keep], "scores": kept_scores[keep],
                        "labels": labels[keep]})
        return out

    def _level_candidates(self, scores, codes, anchors, image_size):
        """(boxes, scores, labels) of one image's level: scores (A_l, K), codes (A_l, 4)."""
        flat = scores.reshape(-1)
        index = np.flatnonzero(flat > self.score_thresh)
        top = np.argsort(-flat[index], kind="stable")[:self.topk_candidates]
        index = index[top]
        anchor_index, labels = index // self.num_classes, index % self.num_classes
        boxes = self.box_coder.decode(codes[anchor_index], anchors[anchor_index])
        boxes = F.clip_boxes(boxes, image_size).numpy()
        return boxes, flat[index], labels.astype(np.int64)


def _layout(array, width):
    """numpy (N, A * width, H, W) -> (N, H * W * A, width)."""
    n, c, h, w = array.shape
    return array.reshape(n, c // width, width, h, w).transpose(0, 3, 4, 1, 2).reshape(
        n, -1, width)


def _numpy(x):
    return x.numpy() if isinstance(x, Tensor) else x


def _check_target(target, index, num_classes):
    """{"boxes": (N, 4) float32, "labels": (N,) int64} as numpy, or an error naming the
    image and what is wrong."""
    if not isinstance(target, dict) or "boxes" not in target or "labels" not in target:
        raise ValueError(f"RetinaNet: target {index} must be a dict with 'boxes' and 'labels'")
    boxes = np.asarray(_numpy(target["boxes"]), np.float32)
    labels = np.asarray(_numpy(target["labels"]))
    boxes = boxes.reshape(-1, 4) if boxes.size == 0 else boxes
    if boxes.ndim != 2 or boxes.shape[1] != 4 or labels.shape != (boxes.shape[0],):
        raise ValueError(f"RetinaNet: target {index}: boxes must be (N, 4) and labels (N,), "
                         f"got {boxes.shape} and {labels.shape}")
    bad = np.flatnonzero((boxes[:, 2] <= boxes[:, 0]) | (boxes[:, 3] <= boxes[:, 1]))
    if bad.size:
        raise ValueError(f"RetinaNet: target {index}: boxes need positive width and height; "
                         f"box {int(bad[0])} is {boxes[bad[0]].tolist()} (x1, y1, x2, y2)")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"RetinaNet: target {index}: labels must be in [0, {num_classes}), "
                         f"got {labels.min()}..{labels.max()}")
    return dict(target, boxes=boxes, labels=labels.astype(np.int64))


# ---------------------------------------------------------------- builders

def _retinanet(arch, backbone_arch, *, num_classes=91, weights=None, pretrained_backbone=False,
               trainable_backbone_layers=None, fpn_channels=256, **kwargs):
    """RetinaNet on `backbone_arch`'s C3-C5 (torchvision's retinanet_resnet50_fpn).

    weights: a manifest name or file of the whole detector (then the backbone's ImageNet
    weights are not loaded). pretrained_backbone: the backbone's default ImageNet entry.
    With either, BatchNorm is frozen and `trainable_backbone_layers` (0-5, stages from the
    top; 5 includes the stem) defaults to 3, else every layer trains with BatchNorm2d
    (torchvision's rules). kwargs: RetinaNet's (min_size, max_size, score_thresh, ...).
    """
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
    backbone = BackboneWithFPN(body, ("C3", "C4", "C5"), fpn_channels,
                               LastLevelP6P7(fpn_channels, fpn_channels))
    model = RetinaNet(backbone, num_classes, **kwargs)
    if weights is not None:
        load_detection_weights(model, arch, weights,
                               ("head.classification_head.cls_logits.weight",
                                "head.classification_head.cls_logits.bias"))
    return model


def _register(arch, backbone_arch, card=None, **defaults):
    return register_model(arch, partial(_retinanet, arch, backbone_arch, **defaults),
                          detection_card(backbone=backbone_arch, **(card or {})))


retinanet_resnet50_fpn = _register("retinanet_resnet50_fpn", "resnet50")
# ResNet-18's C3-C5 (128/256/512 channels), torchvision's other defaults
retinanet_resnet18_fpn = _register("retinanet_resnet18_fpn", "resnet18")
# the smoke recipes' detector, not a paper variant: retinanet_resnet18_fpn with a 64-channel
# FPN and heads for 128-pixel images (every default can be overridden)
_SMALL = {"fpn_channels": 64, "min_size": 128, "max_size": 128}
retinanet_small = _register(
    "retinanet_small", "resnet18",
    {"input_size": (3, 128, 128),
     "preprocessing": dict(TORCHVISION_DETECTION, min_size=128, max_size=128)}, **_SMALL)
