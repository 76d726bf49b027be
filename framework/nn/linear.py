"""Linear: y = x @ weight.T + bias, weight (out_features, in_features) as in PyTorch."""
import math

import numpy as np

from .. import functional as F
from . import init
from .module import Module
from .parameter import Parameter


def reset_fan_in_uniform(weight, bias):
    """PyTorch's default for Linear and conv layers: kaiming_uniform_(a=sqrt(5)) on the weight,
    i.e. U(+-1/sqrt(fan_in)), and U(+-1/sqrt(fan_in)) on the bias."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = init.calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(bias, -bound, bound)


class Linear(Module):
    """(..., in_features) -> (..., out_features).

    >>> import tianyuan as ty
    >>> Linear(4, 2)(ty.randn(3, 4)).shape
    (3, 2)
    """

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = Parameter(np.empty((self.out_features, self.in_features), np.float32))
        if bias:
            self.bias = Parameter(np.empty((self.out_features,), np.float32))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        reset_fan_in_uniform(self.weight, self.bias)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
