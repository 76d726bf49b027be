"""`nn.qat`: the float classes with observers and fake quantizers, same names.

Built by `tianyuan.quantization.quantize_qat`; each class has `from_float`.
"""
from .conv import (Conv2d, ConvBn2d, ConvBnReLU2d, ConvBnReLU62d, ConvReLU2d,
                   ConvReLU62d)
from .deconv import (ConvTranspose2d, ConvTransposeBn2d, ConvTransposeBnReLU2d,
                     ConvTransposeReLU2d)
from .island import FloatIsland
from .linear import Linear, LinearReLU
from .module import QATModule
from .norm import BatchNorm2d, BnReLU2d
from .pooling import AdaptiveAvgPool2d, AvgPool2d
from .quant_points import Add, AddReLU, Concat, DequantStub, QuantStub
