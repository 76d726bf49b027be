"""Activation layers; each forward is one call into F. `inplace` is accepted for PyTorch
compatibility and ignored (our ops never write into their inputs)."""
from .. import functional as F
from .module import Module


class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return F.relu(x)


class ReLU6(ReLU):
    def forward(self, x):
        return F.relu6(x)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Hsigmoid(ReLU):
    """relu6(x + 3) / 6 (PyTorch's Hardsigmoid)."""

    def forward(self, x):
        return F.hsigmoid(x)


class Hswish(ReLU):
    """x * relu6(x + 3) / 6 (PyTorch's Hardswish)."""

    def forward(self, x):
        return F.hswish(x)


Hardsigmoid = Hsigmoid
Hardswish = Hswish


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    """Softmax along `axis` (PyTorch calls it dim; both names are accepted)."""

    def __init__(self, axis=-1, dim=None):
        super().__init__()
        self.axis = axis if dim is None else dim

    def forward(self, x):
        return F.softmax(x, self.axis)

    def extra_repr(self):
        return f"axis={self.axis}"
