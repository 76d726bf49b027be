"""QAT Linear and LinearReLU: fake-quantized weight (per output channel) and output."""
from ... import functional as F
from ...quantization import reference as R
from .. import linear as float_linear
from .conv import activate
from .module import QATModule


class Linear(float_linear.Linear, QATModule):
    activation = None

    def folded(self):
        return self.weight, self.bias

    def forward(self, x):
        return self.int8_twin(x, self.float_forward, self.int8_sums, axis=-1)

    def float_forward(self, x):
        y = F.linear(x, self.fake_quant_weight(self.weight), self.bias)
        return self.fake_quant_act(activate(y, self.activation))

    def int8_sums(self, qx, zx, qw):
        acc = R.gemm(qx.reshape(-1, qx.shape[-1]), zx, qw)
        return acc.reshape(qx.shape[:-1] + (qw.shape[0],))


class LinearReLU(Linear):
    activation = "relu"
