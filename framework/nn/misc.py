"""Dropout, Identity, Rescale, Flatten, ChannelShuffle, Upsample."""
import numpy as np

from .. import functional as F
from ..ops.shape import shuffled
from .module import Module


class Dropout(Module):
    """Zeroes elements with probability p in training (survivors scaled by 1 / (1 - p))."""
    graph_alias = True  # jit.trace (eval mode): returns its input itself

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class Identity(Module):
    """Returns its input; takes and ignores any constructor arguments."""
    graph_alias = True  # jit.trace: returns its input itself

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Rescale(Module):
    """x * scale + shift with constants: scalars, or one per channel (axis 1) as sequences
    (a sigmoid's [0, 1] onto [-1, 1], a per-channel normalisation). Arithmetic written in a
    forward is not recorded by `jit.trace`, a module is; the constants are plain config."""

    def __init__(self, scale=1.0, shift=0.0):
        super().__init__()
        self.scale, self.shift = _constant(scale), _constant(shift)

    def forward(self, x):
        return x * _along_channels(self.scale, x.ndim) + _along_channels(self.shift, x.ndim)

    def extra_repr(self):
        return f"scale={self.scale}, shift={self.shift}"


def _constant(value):
    return float(value) if np.ndim(value) == 0 else tuple(float(v) for v in np.ravel(value))


def _along_channels(value, ndim):
    if isinstance(value, float):
        return value
    return np.asarray(value, np.float32).reshape((1, -1) + (1,) * (ndim - 2))


class Flatten(Module):
    """Flattens axes start_dim..end_dim (default: everything but the batch axis)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim, self.end_dim)

    def graph_step(self, x):
        """For `jit.trace`: the same reshape of the input's array (of any batch size)."""
        if x.ndim == 0:
            return None
        start, end = self.start_dim % x.ndim, self.end_dim % x.ndim
        return lambda a: a.reshape(a.shape[:start] + (-1,) + a.shape[end + 1:])

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class ChannelShuffle(Module):
    """ShuffleNet's channel shuffle (F.channel_shuffle) as a module, so that `jit.trace`
    records it; int8 activations pass through it with their scale and zero point."""

    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, x):
        return F.channel_shuffle(x, self.groups)

    def graph_step(self, x):
        """For `jit.trace`: the same shuffle of the input's array."""
        groups = self.groups
        return lambda a: shuffled(a, groups)

    def extra_repr(self):
        return f"groups={self.groups}"


class Upsample(Module):
    """F.interpolate as a module (so that jit.trace sees it): by `scale_factor` or to `size`.

    >>> import tianyuan as ty
    >>> Upsample(scale_factor=2, mode="bilinear", align_corners=False)(ty.randn(1, 3, 4, 4)).shape
    (1, 3, 8, 8)
    """

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None):
        super().__init__()
        self.size, self.scale_factor = size, scale_factor
        self.mode, self.align_corners = mode, align_corners

    def forward(self, x):
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)

    def extra_repr(self):
        return f"size={self.size}, scale_factor={self.scale_factor}, mode={self.mode!r}"
