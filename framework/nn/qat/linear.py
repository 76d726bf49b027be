"""QAT Linear and LinearReLU: fake-quantized weight (per output channel) and output."""
from ... import functional as F
from .. import linear as float_linear
from .conv import activate
from .module import QATModule


class Linear(float_linear.Linear, QATModule):
    activation = None

    def folded(self):
        return self.weight, self.bias

    def forward(self, x):
        y = F.linear(x, self.fake_quant_weight(self.weight), self.bias)
        return self.fake_quant_act(activate(y, self.activation))


class LinearReLU(Linear):
    activation = "relu"
