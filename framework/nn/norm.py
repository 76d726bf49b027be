"""BatchNorm1d / BatchNorm2d with PyTorch's state: weight, bias, running_mean, running_var,
num_batches_tracked (int64, 0-d); FrozenBatchNorm2d, the same affine held fixed (detection
backbones)."""
import numpy as np

from .. import functional as F
from ..ops import norm as N
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

    def _running_factor(self):
        """The running statistics' update weight for this batch (counted, in training)."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.data[...] += 1
            if self.momentum is None:
                # cumulative moving average over every batch seen so far
                factor = 1.0 / float(self.num_batches_tracked.data)
        return factor

    def forward(self, x, clamp=None, input_scale=None, ste=None):
        """clamp = (lo, hi): the ReLU / ReLU6 after this layer in the same passes
        (F.batch_norm's clamp; nn.Sequential passes it in training). input_scale (C,): normalise
        x * input_scale without forming it; ste: a straight-through estimator after it, in the
        same node (F.batch_norm's; QAT's ConvBn2d)."""
        self._check_input(x)
        factor = self._running_factor()
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


class SyncBatchNorm2d(BatchNorm2d):
    """BatchNorm2d that, training under several data-parallel processes, normalises with the
    statistics of the whole batch across them (ops.norm.SyncBatchNormTrain): small batches
    per process then train as one large batch. With one process, or in eval, it is
    BatchNorm2d. `convert_sync_batchnorm(model)` swaps a model's BatchNorm2d layers for it."""

    def forward(self, x, clamp=None, input_scale=None, ste=None):
        from .. import distributed
        if not (self.training and distributed.world_size() > 1):
            return super().forward(x, clamp, input_scale, ste)
        if input_scale is not None or ste is not None or not self.affine:
            raise ValueError("SyncBatchNorm2d: input_scale, ste and affine=False are "
                             "BatchNorm2d's alone (QAT's ConvBn2d keeps its own batch norm)")
        self._check_input(x)
        factor, track = self._running_factor(), self.track_running_stats
        y = N.SyncBatchNormTrain.apply(
            x, self.weight, self.bias, running_mean=self.running_mean.data if track else None,
            running_var=self.running_var.data if track else None, momentum=factor,
            eps=self.eps)
        return y if clamp is None else F.clip(y, clamp[0], clamp[1])


def convert_sync_batchnorm(model):
    """Swap every BatchNorm2d of `model` (in place) for a SyncBatchNorm2d holding the same
    parameters and buffers; returns the model."""
    for name, child in list(model._modules.items()):
        if type(child) is BatchNorm2d:
            sync = SyncBatchNorm2d(child.num_features, child.eps, child.momentum, child.affine,
                                   child.track_running_stats)
            for key, value in list(child._parameters.items()) + list(child._buffers.items()):
                (sync._parameters if key in child._parameters else sync._buffers)[key] = value
            sync.train(child.training)
            model._modules[name] = sync
        elif child is not None:
            convert_sync_batchnorm(child)
    return model


class FrozenBatchNorm2d(Module):
    """BatchNorm2d with its statistics and affine fixed (torchvision.ops.FrozenBatchNorm2d):
    y = (x - running_mean) / sqrt(running_var + eps) * weight + bias, in training too.
    All four are buffers, so nothing is trained and the names are BatchNorm2d's less
    `num_batches_tracked`, which a loaded BatchNorm2d state dict may carry (dropped).
    Detection backbones use it where a few images per batch would make batch statistics
    noise. `quantization.fuse` folds it into the conv before it as it folds a BatchNorm2d
    (`fuse_as`); QAT's ConvBn2d then always folds with these fixed statistics.

    >>> bn = FrozenBatchNorm2d(8)
    >>> sorted(bn.state_dict())
    ['bias', 'running_mean', 'running_var', 'weight']
    """
    fuse_as = "BatchNorm2d"
    ignored_on_load = ("num_batches_tracked",)

    def __init__(self, num_features, eps=1e-5):
        super().__init__()
        self.num_features, self.eps = int(num_features), eps
        for name, fill in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0),
                           ("running_var", 1.0)):
            self.register_buffer(name, Tensor(np.full(self.num_features, fill, np.float32)))

    def forward(self, x):
        if x.ndim != 4 or x.shape[1] != self.num_features:
            raise ValueError(f"FrozenBatchNorm2d: expected (N, {self.num_features}, H, W), got "
                             f"shape {tuple(x.shape)}")
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            False, 0.0, self.eps)

    @classmethod
    def from_batchnorm(cls, bn):
        """A FrozenBatchNorm2d holding a copy of `bn`'s statistics and affine (1 and 0 where
        it has none)."""
        if bn.running_mean is None:
            raise ValueError(f"FrozenBatchNorm2d: {bn!r} keeps no running statistics to freeze "
                             "(track_running_stats=False)")
        frozen = cls(bn.num_features, bn.eps)
        for name in ("weight", "bias", "running_mean", "running_var"):
            value = getattr(bn, name)
            if value is not None:
                frozen._buffers[name].data[...] = value.data
        return frozen.train(bn.training)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}"


def convert_frozen_batchnorm(module):
    """Every BatchNorm2d (and SyncBatchNorm2d) of `module` swapped, in place, for a
    FrozenBatchNorm2d holding a copy of its state; returns the module (a new
    FrozenBatchNorm2d where `module` is itself a BatchNorm2d).

    >>> net = convert_frozen_batchnorm(Sequential(Conv2d(3, 8, 3), BatchNorm2d(8)))
    >>> type(net[1]).__name__
    'FrozenBatchNorm2d'
    """
    if isinstance(module, BatchNorm2d):
        return FrozenBatchNorm2d.from_batchnorm(module)
    for name, child in list(module._modules.items()):
        if child is not None:
            module._modules[name] = convert_frozen_batchnorm(child)
    return module


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
