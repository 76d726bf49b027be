"""QAT quantization points: each fake-quantizes its output with its own observer
(DequantStub, the end of the int8 region, has none)."""
from ... import functional as F
from .. import quant_points as float_points
from .module import QATModule


class QuantStub(float_points.QuantStub, QATModule):
    with_weight = False

    def forward(self, x):
        return self.fake_quant_act(x)


class DequantStub(float_points.DequantStub, QATModule):
    with_weight = False

    def attach_quantizers(self, qconfig):
        self.qconfig = qconfig


class Add(float_points.Add, QATModule):
    with_weight = False

    def forward(self, a, b):
        return self.fake_quant_act(a + b)


class AddReLU(float_points.AddReLU, QATModule):
    with_weight = False

    def forward(self, a, b):
        return self.fake_quant_act(F.relu(a + b))


class Concat(float_points.Concat, QATModule):
    with_weight = False

    def forward(self, tensors):
        return self.fake_quant_act(self.join(tensors))
