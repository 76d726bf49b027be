"""Image classification models: ResNet, MobileNetV2, ShuffleNet V1 and V2, each its backbone
(`*Backbone`, `forward_features`) plus a head."""
from .common import Classifier
from .mobilenet_v2 import InvertedResidual, MobileNetV2, MobileNetV2Backbone, mobilenet_v2
from .resnet import (BasicBlock, Bottleneck, ResNet, ResNetBackbone, resnet18, resnet34, resnet50,
                     resnet101, resnet152)
from .shapesnet import ShapesNet, shapesnet
from .shufflenet_v1 import (ShuffleNetV1, ShuffleNetV1Backbone, ShuffleUnitV1, shufflenet_v1,
                            shufflenet_v1_x0_5_g3, shufflenet_v1_x0_5_g8, shufflenet_v1_x1_0_g3,
                            shufflenet_v1_x1_0_g8, shufflenet_v1_x1_5_g3, shufflenet_v1_x1_5_g8,
                            shufflenet_v1_x2_0_g3, shufflenet_v1_x2_0_g8)
from .shufflenet_v2 import (ShuffleNetV2, ShuffleNetV2Backbone, ShuffleUnitV2, shufflenet_v2_x0_5,
                            shufflenet_v2_x1_0, shufflenet_v2_x1_5, shufflenet_v2_x2_0)
