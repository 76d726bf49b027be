"""The Fast R-CNN box branch of Faster R-CNN (Girshick, 1504.08083; torchvision's
models/detection/roi_heads.py and faster_rcnn.py, its module names and defaults).

    box_roi_pool     MultiScaleRoIAlign over FPN levels "0".."3", 7 x 7, sampling ratio 2
    box_head         TwoMLPHead: fc6, fc7 (ReLU after each), 1024 wide
    box_predictor    FastRCNNPredictor: cls_score (K), bbox_pred (K * 4; class-specific)

Class column 0 is the background. Training: the proposals and the ground-truth boxes are
matched at IoU 0.5 (no low-quality matches), 512 per image sampled a quarter positive;
cross-entropy over the sampled, smooth L1 (beta 1/9) over the positives' own-class codes,
summed and divided by the sampled count. Inference: softmax scores, class-specific boxes
(BoxCoder weights 10, 10, 5, 5), clipped; per image the non-background scores above 0.05,
boxes of side >= 0.01, class-wise NMS at 0.5, the best 100.
"""
import numpy as np

import tianyuan.functional as F
from tianyuan import nn
from tianyuan.tensor import Tensor

from .box_coder import BoxCoder
from .matcher import BELOW_LOW_THRESHOLD, BETWEEN_THRESHOLDS, Matcher
from .rpn import sample_fg_bg


class TwoMLPHead(nn.Module):
    """(R, C, 7, 7) pooled features -> (R, representation_size)."""

    def __init__(self, in_channels, representation_size):
        super().__init__()
        self.fc6 = nn.Linear(in_channels, representation_size)
        self.fc7 = nn.Linear(representation_size, representation_size)
        self.relu6, self.relu7 = nn.ReLU(), nn.ReLU()
        self.quant = nn.QuantStub()          # the pooled float features into int8

    def forward(self, x):
        x = self.quant(F.flatten(x, 1))
        return self.relu7(self.fc7(self.relu6(self.fc6(x))))


class FastRCNNPredictor(nn.Module):
    """(R, D) -> class logits (R, K) and class-specific box codes (R, K * 4)."""

    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.cls_score = nn.Linear(in_channels, num_classes)
        self.bbox_pred = nn.Linear(in_channels, num_classes * 4)
        self.dequant = nn.DequantStub()

    def forward(self, x):
        return self.dequant(self.cls_score(x)), self.dequant(self.bbox_pred(x))


def _softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


class RoIHeads(nn.Module):
    def __init__(self, box_roi_pool, box_head, box_predictor, fg_iou_thresh=0.5,
                 bg_iou_thresh=0.5, batch_size_per_image=512, positive_fraction=0.25,
                 bbox_reg_weights=(10.0, 10.0, 5.0, 5.0), score_thresh=0.05, nms_thresh=0.5,
                 detections_per_img=100):
        super().__init__()
        self.box_roi_pool, self.box_head, self.box_predictor = box_roi_pool, box_head, box_predictor
        self.proposal_matcher = Matcher(fg_iou_thresh, bg_iou_thresh,
                                        allow_low_quality_matches=False)
        self.batch_size_per_image, self.positive_fraction = batch_size_per_image, positive_fraction
        self.box_coder = BoxCoder(bbox_reg_weights)
        self.score_thresh, self.nms_thresh = score_thresh, nms_thresh
        self.detections_per_img = detections_per_img

    def forward(self, features, proposals, image_sizes, targets=None):
        """Training: {"loss_classifier", "loss_box_reg"}; eval: a {"boxes", "scores",
        "labels" (class columns)} numpy dict per image, in the resized images' pixels."""
        if self.training:
            proposals, labels, box_targets = self.select_training_samples(proposals, targets)
        logits, codes = self.box_predictor(
            self.box_head(self.box_roi_pool(features, proposals, image_sizes)))
        if self.training:
            return self.loss(logits, codes, labels, box_targets)
        return self.postprocess(logits.numpy(), codes.numpy(), proposals, image_sizes)

    def select_training_samples(self, proposals, targets):
        """Per image: the proposals plus the ground truth, matched, sampled (in index order,
        as torchvision), their class columns and box-code targets."""
        sampled, labels, box_targets = [], [], []
        for boxes, target in zip(proposals, targets):
            gt, gt_labels = target["boxes"], target["labels"]
            boxes = np.concatenate([boxes, gt]).astype(np.float32, copy=False)
            if gt.shape[0] == 0:
                matched = np.zeros(boxes.shape[0], np.int64)
                image_labels = np.zeros(boxes.shape[0], np.int64)
            else:
                matched = self.proposal_matcher(F.box_iou(gt, boxes).numpy())
                image_labels = gt_labels[np.maximum(matched, 0)].astype(np.int64)
                image_labels[matched == BELOW_LOW_THRESHOLD] = 0
                image_labels[matched == BETWEEN_THRESHOLDS] = -1
            pos, neg = sample_fg_bg(image_labels, self.batch_size_per_image,
                                    self.positive_fraction)
            keep = np.sort(np.concatenate([pos, neg]))
            codes = np.zeros((keep.size, 4), np.float32)
            fg = image_labels[keep] > 0
            if fg.any():
                codes[fg] = self.box_coder.encode(gt[matched[keep[fg]]], boxes[keep[fg]])
            sampled.append(boxes[keep])
            labels.append(image_labels[keep])
            box_targets.append(codes)
        return sampled, np.concatenate(labels), np.concatenate(box_targets)

    def loss(self, logits, codes, labels, box_targets):
        """torchvision's fastrcnn_loss."""
        classifier = F.cross_entropy(logits, Tensor(labels))
        pos = np.flatnonzero(labels > 0)
        r, k = logits.shape
        own = F.reshape(codes, r, k, 4)[pos, labels[pos]]              # (P, 4)
        box = F.smooth_l1_loss(own, Tensor(box_targets[pos]), beta=1.0 / 9,
                               reduction="sum") / float(max(labels.size, 1))
        return {"loss_classifier": classifier, "loss_box_reg": box}

    def postprocess(self, logits, codes, proposals, image_sizes):
        k = logits.shape[1]
        scores_all = _softmax(logits).astype(np.float32)
        codes = codes.reshape(-1, 4)
        out, start = [], 0
        for boxes, size in zip(proposals, image_sizes):
            r = boxes.shape[0]
            decoded = self.box_coder.decode(codes[start * k:(start + r) * k],
                                            np.repeat(boxes, k, axis=0))
            decoded = F.clip_boxes(decoded, size).numpy().reshape(r, k, 4)
            scores = scores_all[start:start + r]
            start += r
            labels = np.broadcast_to(np.arange(k, dtype=np.int64), (r, k))
            # background column out; (R * (K - 1), ...) box-major as torchvision's reshape
            decoded, scores, labels = (decoded[:, 1:].reshape(-1, 4), scores[:, 1:].reshape(-1),
                                       labels[:, 1:].reshape(-1))
            keep = np.flatnonzero(scores > self.score_thresh)
            keep = keep[F.remove_small_boxes(decoded[keep], 1e-2).numpy()]
            decoded, scores, labels = decoded[keep], scores[keep], labels[keep]
            keep = F.batched_nms(decoded, scores, labels, self.nms_thresh).numpy()
            keep = keep[:self.detections_per_img]
            out.append({"boxes": decoded[keep], "scores": scores[keep], "labels": labels[keep]})
        return out
