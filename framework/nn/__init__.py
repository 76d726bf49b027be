"""Layers and models: `Module` holds state, `tianyuan.functional` does the math.

>>> import tianyuan as ty
>>> from tianyuan import nn
>>> net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
>>> net.eval()  # doctest: +ELLIPSIS
Sequential(...
"""
from .. import functional
from . import init
from .activation import (Hardsigmoid, Hardswish, Hsigmoid, Hswish, LeakyReLU, ReLU, ReLU6,
                         Sigmoid, Softmax, Softplus, Tanh)
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv2d, ConvTranspose2d
from .linear import Linear
from .misc import ChannelShuffle, Dropout, Flatten, Identity, Rescale, Upsample
from .module import IncompatibleKeys, Module, RemovableHandle
from .norm import (BatchNorm1d, BatchNorm2d, FrozenBatchNorm2d, SyncBatchNorm2d,
                   batch_norm_act, convert_frozen_batchnorm, convert_sync_batchnorm)
from .parameter import Parameter
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .poolers import MultiScaleRoIAlign, RoIAlign
from .quant_points import Add, AddReLU, Concat, DequantStub, QuantStub
from .fused import (ConvBn2d, ConvBnReLU2d, ConvBnReLU62d, ConvReLU2d, ConvReLU62d,
                    LinearReLU)
from . import fused, qat, quantized  # noqa: E402  (QAT and int8 twins, same class names)
