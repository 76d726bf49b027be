"""Detection models (float, QAT-ready) with torchvision's module names, and their parts:
FPN, anchors, box coder, matcher and the GeneralizedRCNN transform. Box ops (IoU, NMS) are
core ops (tianyuan.functional, framework/ops/boxes.py).

>>> from tianyuan.zoo import list_models
>>> list_models(task="detection")
['retinanet_resnet18_fpn', 'retinanet_resnet50_fpn', 'retinanet_small']
"""
from .anchors import AnchorGenerator, cell_anchors, grid_anchors, retinanet_anchor_generator
from .box_coder import BoxCoder
from .common import detection_card, load_detection_weights
from .fpn import BackboneWithFPN, FeaturePyramidNetwork, LastLevelP6P7
from .matcher import Matcher
from .retinanet import (RetinaNet, RetinaNetClassificationHead, RetinaNetHead,
                        RetinaNetRegressionHead, retinanet_resnet18_fpn, retinanet_resnet50_fpn,
                        retinanet_small)
from .transform import GeneralizedRCNNTransform
