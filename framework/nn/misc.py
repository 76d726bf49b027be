"""Dropout, Identity, Flatten."""
from .. import functional as F
from .module import Module


class Dropout(Module):
    """Zeroes elements with probability p in training (survivors scaled by 1 / (1 - p))."""

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

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Flatten(Module):
    """Flattens axes start_dim..end_dim (default: everything but the batch axis)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
