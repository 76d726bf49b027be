"""`nn.quantized`: int8 modules on the native kernels, named as their float/QAT twins.

Activations travel as Tensors of `QArray` (see `tianyuan.quantization.qarray`).
Built by `tianyuan.quantization.quantize`; each class has `from_qat` (or `from_float`
for the pass-through layers).
"""
from .conv import (Conv2d, ConvBn2d, ConvBnReLU2d, ConvBnReLU62d, ConvReLU2d, ConvReLU62d,
                   Linear, LinearReLU)
from .deconv import (ConvTranspose2d, ConvTransposeBn2d, ConvTransposeBnReLU2d,
                     ConvTransposeReLU2d)
from .island import FloatIsland
from .module import QuantizedModule
from .norm import BatchNorm2d, BnReLU2d
from .passthrough import AdaptiveAvgPool2d, AvgPool2d, Dropout, MaxPool2d, ReLU, ReLU6
from .quant_points import Add, AddReLU, Concat, DequantStub, QuantStub
