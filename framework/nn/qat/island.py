"""A float layer with no int8 form between int8 ones (a Sigmoid, a LeakyReLU, a user's own
leaf module): `quantize_qat` wraps it in `FloatIsland`, which runs it in float and
fake-quantizes its output, so that `quantize` knows the scale its int8 successor reads.

The int8 twin (nn.quantized.FloatIsland) dequantizes its input, runs the float layer and
quantizes the result with that scale; given a float input (a layer after the model's
DequantStub) it runs the layer alone and returns float, so a wrapped layer outside the int8
region costs nothing but its output's rounding in QAT.
"""
from ..module import Module
from .module import QATModule


class FloatIsland(Module, QATModule):
    with_weight = False

    def __init__(self, module):
        super().__init__()
        self.module = module

    @classmethod
    def from_float(cls, module, qconfig):
        island = cls(module)
        island.training = module.training
        island.attach_quantizers(qconfig)
        return island

    def forward(self, *args):
        return self.fake_quant_act(self.module(*args))
