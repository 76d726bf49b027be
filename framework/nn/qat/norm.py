"""QAT batch norm alone (BatchNorm2d, BnReLU2d): a BN with no conv before it to fold into, as
the generators' BN-ReLU before an upsampling or after a linear layer (zoo/gan/).

In eval, BN is the per-channel affine ``y = x * f + (beta - mean * f)`` with ``f = gamma /
sqrt(running_var + eps)``: a depthwise 1x1 convolution of weight f (C, 1, 1, 1) and that
bias, which is what it runs here (weights fake-quantized per channel: one weight a channel,
so the int8 weight is +-127 and its scale |f| / 127, f to float rounding) and what
`nn.quantized.BatchNorm2d` runs in int8. In training it normalises with the batch statistics
(updating the running ones) and fake-quantizes its output, as ConvBn2d does.
"""
import numpy as np

from ... import functional as F
from ...quantization import reference as R
from ...tensor import Tensor
from .. import norm as float_norm
from .conv import activate
from .module import QATModule


class BatchNorm2d(float_norm.BatchNorm2d, QATModule):
    activation = None

    def folded(self):
        """(weight (C, 1, 1, 1), bias (C,)) Tensors: the eval affine as a depthwise conv."""
        if self.running_mean is None or self.running_var is None:
            raise ValueError(f"{type(self).__name__}: quantizing needs running statistics "
                             "(track_running_stats=True)")
        inv = Tensor((1.0 / np.sqrt(self.running_var.data + self.eps)).astype(np.float32))
        f = inv if self.weight is None else self.weight * inv
        b = Tensor(-self.running_mean.data) * f
        b = b if self.bias is None else b + self.bias
        return F.reshape(f, (-1, 1, 1, 1)), b

    def forward(self, x):
        return self.int8_twin(x, self.float_forward, self.int8_sums)

    def float_forward(self, x):
        if self.training:
            y = float_norm.BatchNorm2d.forward(self, x)
        else:
            w, b = self.folded()
            y = F.conv2d(x, self.fake_quant_weight(w), b, groups=self.num_features)
        return self.fake_quant_act(activate(y, self.activation))

    def int8_sums(self, qx, zx, qw):
        return R.conv2d(qx, zx, qw, groups=self.num_features)


class BnReLU2d(BatchNorm2d):
    activation = "relu"
