"""Generative models: the GAN pairs of the references (resnet_gan.py: pytorch_mimicry /
MegEngine Models; cnn32.py: pytorch-gan-collections), registered with task "generation";
and Inception-v3, the network FID and IS run on (inception.py: torchvision's and
pytorch-fid's), task "image_features".

>>> from tianyuan.zoo import get_model, list_models
>>> list_models(task="generation")
['dcgan_cifar10', 'dcgan_cnn32_cifar10', 'wgan_cifar10', 'wgan_cnn32_cifar10']
"""
from .cnn32 import (DCGANDiscriminator32, DCGANGenerator32, WGANDiscriminator32,
                    WGANGenerator32, dcgan_cnn32_cifar10, wgan_cnn32_cifar10)
from .common import GAN, GAN_PREPROCESSING, gan_card, load_gan_weights
from .inception import FIDInception, Inception3, fid_inception_v3, inception_v3
from .resnet_gan import (DBlock, DBlockOptimized, GBlock, ResNetDiscriminator32,
                         ResNetGenerator32, SampleNorm, dcgan_cifar10, wgan_cifar10)
