"""Region Proposal Network (Ren et al., Faster R-CNN, 1506.01497 section 3.1) with
torchvision's module names and defaults (models/detection/rpn.py).

    head.conv.0.0      3x3 conv (+ ReLU, conv.0.1) shared by the levels
    head.cls_logits    1x1 conv, A objectness logits per position
    head.bbox_pred     1x1 conv, A * 4 box codes per position (BoxCoder weights 1)

Per image, per level the pre_nms_top_n highest logits; their boxes decoded, clipped, the
tiny ones (< 1e-3) dropped, NMS at 0.7 per level, the post_nms_top_n best kept. Training:
anchors matched at IoU 0.7 / 0.3 with low-quality matches, 256 sampled at half positive;
binary cross-entropy over the sampled, smooth L1 (beta 1/9) over the sampled positives,
summed and divided by the sampled count. Proposals are numpy: no gradient flows through
them (torchvision detaches them too).
"""
import numpy as np

import tianyuan.functional as F
from tianyuan import nn
from tianyuan.random import rng
from tianyuan.tensor import Tensor

from .box_coder import BoxCoder
from .matcher import BELOW_LOW_THRESHOLD, BETWEEN_THRESHOLDS, Matcher
from .retinanet import flatten_levels


def sample_fg_bg(labels, batch_size_per_image, positive_fraction):
    """torchvision's BalancedPositiveNegativeSampler for one image: (positive, negative)
    index arrays among labels >= 1 and labels == 0, at most batch_size_per_image in all
    and positive_fraction of them positive, drawn at random (the framework's generator)."""
    positive = np.flatnonzero(labels >= 1)
    negative = np.flatnonzero(labels == 0)
    num_pos = min(positive.size, int(batch_size_per_image * positive_fraction))
    num_neg = min(negative.size, batch_size_per_image - num_pos)
    generator = rng()
    return (positive[generator.permutation(positive.size)[:num_pos]],
            negative[generator.permutation(negative.size)[:num_neg]])


class RPNHead(nn.Module):
    """Per level (N, C, H, W) -> (N, A, H, W) logits and (N, A * 4, H, W) box codes."""

    def __init__(self, in_channels, num_anchors):
        super().__init__()
        self.conv = nn.Sequential(nn.Sequential(nn.Conv2d(in_channels, in_channels, 3, 1, 1),
                                                nn.ReLU()))
        self.cls_logits = nn.Conv2d(in_channels, num_anchors, 1)
        self.bbox_pred = nn.Conv2d(in_channels, num_anchors * 4, 1)
        self.dequant = nn.DequantStub()   # int8 features in, float logits and codes out
        for m in self.modules():          # torchvision's init: N(0, 0.01), bias 0
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)

    def forward(self, features):
        logits, codes = [], []
        for x in features:
            t = self.conv(x)
            logits.append(self.dequant(self.cls_logits(t)))
            codes.append(self.dequant(self.bbox_pred(t)))
        return logits, codes


class RegionProposalNetwork(nn.Module):
    def __init__(self, anchor_generator, head, fg_iou_thresh=0.7, bg_iou_thresh=0.3,
                 batch_size_per_image=256, positive_fraction=0.5, pre_nms_top_n=None,
                 post_nms_top_n=None, nms_thresh=0.7, score_thresh=0.0, min_size=1e-3):
        super().__init__()
        self.anchor_generator, self.head = anchor_generator, head
        self.box_coder = BoxCoder((1.0, 1.0, 1.0, 1.0))
        self.proposal_matcher = Matcher(fg_iou_thresh, bg_iou_thresh,
                                        allow_low_quality_matches=True)
        self.batch_size_per_image, self.positive_fraction = batch_size_per_image, positive_fraction
        # (training, testing), torchvision's defaults
        self._pre_nms_top_n = dict(pre_nms_top_n or {"training": 2000, "testing": 1000})
        self._post_nms_top_n = dict(post_nms_top_n or {"training": 2000, "testing": 1000})
        self.nms_thresh, self.score_thresh, self.min_size = nms_thresh, score_thresh, min_size

    def pre_nms_top_n(self):
        return self._pre_nms_top_n["training" if self.training else "testing"]

    def post_nms_top_n(self):
        return self._post_nms_top_n["training" if self.training else "testing"]

    def forward(self, batch_shape, image_sizes, features, targets=None):
        """(proposals: a (P_i, 4) float32 array per image, losses: {} in eval, else
        {"loss_objectness", "loss_rpn_box_reg"})."""
        logit_maps, code_maps = self.head(features)
        grids = [tuple(m.shape[-2:]) for m in logit_maps]
        per_level = self.anchor_generator.per_level(batch_shape, grids)
        counts = [a.shape[0] for a in per_level]
        anchors = np.concatenate(per_level)
        logits = flatten_levels(logit_maps, 1)               # (N, A_all, 1)
        codes = flatten_levels(code_maps, 4)                 # (N, A_all, 4)
        flat_logits, flat_codes = logits.numpy()[..., 0], codes.numpy()
        proposals = [self.box_coder.decode(c, anchors) for c in flat_codes]
        boxes = [self.filter_proposals(p, s, size, counts)
                 for p, s, size in zip(proposals, flat_logits, image_sizes)]
        if not self.training:
            return boxes, {}
        return boxes, self.compute_loss(logits, codes, anchors, targets)

    def filter_proposals(self, proposals, logits, image_size, counts):
        """One image: per level the top logits, clipped, small ones out, NMS per level."""
        chosen, start = [], 0
        for count in counts:
            top = np.argsort(-logits[start:start + count], kind="stable")
            chosen.append(start + top[:min(self.pre_nms_top_n(), count)])
            start += count
        levels = np.concatenate([np.full(c.size, k, np.int64) for k, c in enumerate(chosen)])
        chosen = np.concatenate(chosen)
        boxes = F.clip_boxes(proposals[chosen], image_size).numpy()
        scores = (1.0 / (1.0 + np.exp(-logits[chosen]))).astype(np.float32)
        keep = F.remove_small_boxes(boxes, self.min_size).numpy()
        keep = keep[scores[keep] >= self.score_thresh]
        boxes, scores, levels = boxes[keep], scores[keep], levels[keep]
        keep = F.batched_nms(boxes, scores, levels, self.nms_thresh).numpy()
        return boxes[keep[:self.post_nms_top_n()]]

    def assign_targets(self, anchors, target):
        """(labels (A,) float32: 1 fg, 0 bg, -1 ignored; matched boxes (A, 4)) of one image."""
        boxes = target["boxes"]
        if boxes.shape[0] == 0:
            return np.zeros(anchors.shape[0], np.float32), np.zeros_like(anchors)
        matched = self.proposal_matcher(F.box_iou(boxes, anchors).numpy())
        labels = (matched >= 0).astype(np.float32)
        labels[matched == BETWEEN_THRESHOLDS] = -1.0
        labels[matched == BELOW_LOW_THRESHOLD] = 0.0
        return labels, boxes[np.maximum(matched, 0)]

    def compute_loss(self, logits, codes, anchors, targets):
        n, a = len(targets), anchors.shape[0]
        labels = np.zeros((n, a), np.float32)
        box_targets = np.zeros((n, a, 4), np.float32)
        positives, sampled = [], []
        for i, target in enumerate(targets):
            labels[i], matched = self.assign_targets(anchors, target)
            pos, neg = sample_fg_bg(labels[i], self.batch_size_per_image,
                                    self.positive_fraction)
            box_targets[i, pos] = self.box_coder.encode(matched[pos], anchors[pos])
            positives.append(i * a + pos)
            sampled.append(i * a + np.concatenate([pos, neg]))
        positives, sampled = np.concatenate(positives), np.concatenate(sampled)
        flat_logits = F.reshape(logits, n * a)
        flat_codes = F.reshape(codes, n * a, 4)
        box_loss = F.smooth_l1_loss(flat_codes[positives],
                                    Tensor(box_targets.reshape(-1, 4)[positives]),
                                    beta=1.0 / 9, reduction="sum") / float(max(sampled.size, 1))
        objectness_loss = F.binary_cross_entropy_with_logits(
            flat_logits[sampled], Tensor(labels.reshape(-1)[sampled]))
        return {"loss_objectness": objectness_loss, "loss_rpn_box_reg": box_loss}
