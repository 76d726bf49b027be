"""Model definitions (float, QAT-ready) and their registry.

>>> from tianyuan import zoo
>>> model = zoo.get_model("resnet18", num_classes=10)
>>> model.fuse_groups()[0]          # what quantize_qat fuses: conv + bn (+ act), by name
['conv1', 'bn1', 'relu']
>>> zoo.get_backbone("resnet18").feature_channels      # stage features for FPN / pose heads
{'C2': 64, 'C3': 128, 'C4': 256, 'C5': 512}
"""
from .backbones import (FEATURES, Backbone, FeatureExtractor, freeze_stages, get_backbone,
                        list_backbones, register_backbone)
from .classification import (BasicBlock, Bottleneck, Classifier, InvertedResidual, MobileNetV2,
                             MobileNetV2Backbone, ResNet, ResNetBackbone, ShapesNet, ShuffleNetV1,
                             ShuffleNetV1Backbone, ShuffleNetV2, ShuffleNetV2Backbone,
                             ShuffleUnitV1, ShuffleUnitV2, mobilenet_v2, resnet18, resnet34,
                             resnet50, resnet101, resnet152, shapesnet, shufflenet_v1,
                             shufflenet_v1_x0_5_g3, shufflenet_v1_x0_5_g8, shufflenet_v1_x1_0_g3,
                             shufflenet_v1_x1_0_g8, shufflenet_v1_x1_5_g3, shufflenet_v1_x1_5_g8,
                             shufflenet_v1_x2_0_g3, shufflenet_v1_x2_0_g8, shufflenet_v2_x0_5,
                             shufflenet_v2_x1_0, shufflenet_v2_x1_5, shufflenet_v2_x2_0)
from .detection import (AnchorGenerator, BoxCoder, FasterRCNN, FeaturePyramidNetwork, Matcher,
                        RetinaNet, fasterrcnn_resnet18_fpn, fasterrcnn_resnet50_fpn,
                        fasterrcnn_small, retinanet_resnet18_fpn, retinanet_resnet50_fpn,
                        retinanet_small)
from .gan import (GAN, FIDInception, Inception3, dcgan_cifar10, dcgan_cnn32_cifar10,
                  fid_inception_v3, inception_v3, wgan_cifar10, wgan_cnn32_cifar10)
from .keypoints import (MSPN, SimpleBaseline, mspn_2stage, mspn_4stage, mspn_small,
                        simplebaseline_res18, simplebaseline_res50, simplebaseline_res101,
                        simplebaseline_res152, simplebaseline_small)
from .registry import (IMAGENET_PREPROCESSING, classification_card, get_builder, get_model,
                       list_models, model_card, model_spec, register_model, unregister_model)
