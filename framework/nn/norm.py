"""BatchNorm1d / BatchNorm2d with PyTorch's state: weight, bias, running_mean, running_var,
num_batches_tracked (int64, 0-d)."""
import numpy as np

from .. import functional as F
from ..tensor import Tensor
from . import init
from .activation import ReLU, ReLU6
from .module import Module
from .parameter import Parameter


class _BatchNorm(Module):
    _input_ndims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = int(num_features), eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(np.empty((self.num_features,), np.float32))
            self.bias = Parameter(np.empty((self.num_features,), np.float32))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", Tensor(np.zeros(self.num_features, np.float32)))
            self.register_buffer("running_var", Tensor(np.ones(self.num_features, np.float32)))
            self.register_buffer("num_batches_tracked", Tensor(np.zeros((), np.int64)))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.data[...] = 0
            self.running_var.data[...] = 1
            self.num_batches_tracked.data[...] = 0

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input(self, x):
        if x.ndim not in self._input_ndims:
            ndims = " or ".join(map(str, self._input_ndims))
            raise ValueError(f"{type(self).__name__}: expected a {ndims}-D input, got shape "
                             f"{tuple(x.shape)}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}: input has {x.shape[1]} channels (shape "
                             f"{tuple(x.shape)}), num_features is {self.num_features}")

    def forward(self, x, clamp=None, input_scale=None, ste=None):
        """clamp = (lo, hi): the ReLU / ReLU6 after this layer in the same passes
        (F.batch_norm's clamp; nn.Sequential passes it in training). input_scale (C,): normalise
        x * input_scale without forming it; ste: a straight-through estimator after it, in the
        same node (F.batch_norm's; QAT's ConvBn2d)."""
        self._check_input(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.data[...] += 1
            if self.momentum is None:
                # cumulative moving average over every batch seen so far
                factor = 1.0 / float(self.num_batches_tracked.data)
        use_batch_stats = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if track else None,
                            self.running_var if track else None, self.weight, self.bias,
                            use_batch_stats, factor, self.eps, clamp, input_scale, ste)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L)."""
    _input_ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W)."""
    _input_ndims = (4,)


def fused_clamp(bn, act):
    """(lo, hi) of the clamp `act` applies where `bn` is a training BatchNorm2d and `act` a
    ReLU or ReLU6 (exactly those classes), neither with hooks: the pair can run as one op
    (F.batch_norm's clamp); else None."""
    if type(bn) is not BatchNorm2d or not bn.training or _hooked(bn) or _hooked(act):
        return None
    kind = type(act)
    return (0.0, np.inf) if kind is ReLU else (0.0, 6.0) if kind is ReLU6 else None


def batch_norm_act(bn, act, x):
    """act(bn(x)) for the modules bn and act; as one op where `fused_clamp` allows (the same
    bits), for blocks that call their batch norm and activation outside a Sequential.

    >>> out = nn.batch_norm_act(self.bn1, self.relu1, self.conv1(x))
    """
    bounds = fused_clamp(bn, act)
    return act(bn(x)) if bounds is None else bn.forward(x, clamp=bounds)


def _hooked(module):
    return bool(module._forward_pre_hooks or module._forward_hooks)
