"""Detection models with torchvision's module names (RetinaNet float and QAT-ready, Faster
R-CNN float: its int8 path is still to come), and their parts:
FPN, anchors, box coder, matcher and the GeneralizedRCNN transform. Box ops (IoU, NMS) are
core ops (tianyuan.functional, framework/ops/boxes.py).

>>> from tianyuan.zoo import list_models
>>> [name for name in list_models(task="detection") if name.startswith("fasterrcnn")]
['fasterrcnn_resnet18_fpn', 'fasterrcnn_resnet50_fpn', 'fasterrcnn_small']
"""
from .anchors import AnchorGenerator, cell_anchors, grid_anchors, retinanet_anchor_generator
from .box_coder import BoxCoder
from .common import detection_card, load_detection_weights
from .faster_rcnn import (FasterRCNN, fasterrcnn_resnet18_fpn, fasterrcnn_resnet50_fpn,
                          fasterrcnn_small, rpn_anchor_generator)
from .fpn import BackboneWithFPN, FeaturePyramidNetwork, LastLevelMaxPool, LastLevelP6P7
from .matcher import Matcher
from .roi_heads import FastRCNNPredictor, RoIHeads, TwoMLPHead
from .rpn import RegionProposalNetwork, RPNHead
from .retinanet import (RetinaNet, RetinaNetClassificationHead, RetinaNetHead,
                        RetinaNetRegressionHead, retinanet_resnet18_fpn, retinanet_resnet50_fpn,
                        retinanet_small)
from .transform import GeneralizedRCNNTransform
