"""Channels-last int8 activations: numpy views of logical shape (N, C, H, W) whose pixels hold
their channels side by side (PyTorch's channels_last memory format). The int8 kernels
(`kernels.py`) read and write them where an int8 model carries that layout
(`nn.quantized.Conv2d.channels_last`); the model code between layers sees (N, C, H, W) either
way.
"""
import numpy as np

from .. import _C


def channels_last_wins():
    """Whether int8 models carry channels-last activations here (`Conv2d.channels_last`):
    on the vnni ISA, where the channels-last engine runs its VNNI tile, and on amx, where
    the AMX convolutions read channels-last rows and store their accumulator rows as they lie
    (no transposes: faster than NCHW there, bench/RESULTS.md, int8 kernels: AMX). Not
    without VNNI (the engine's generic tile)."""
    return _C.current_isa() in ("vnni", "amx")


def is_channels_last(x):
    """Whether x (N, C, H, W) has each pixel's channels side by side (PyTorch's channels_last
    memory format, whatever the pixels' strides): the layout the channels-last engine reads
    and writes. With C = 1, or H = W = 1 and C-contiguous, both layouts are the same."""
    return x.ndim == 4 and (x.strides[1] == x.itemsize or x.shape[1] == 1)


def to_channels_last(x):
    """x (N, C, H, W) -> the same values in channels-last memory (a copy; natively for
    C-contiguous int8 and uint8)."""
    if x.dtype in (np.uint8, np.int8) and x.flags.c_contiguous and x.ndim == 4:
        return _C.int8_to_channels_last(x).transpose(0, 3, 1, 2)
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def as_nhwc(x):
    """A channels-last x (N, C, H, W) as packed (N, H, W, C) (a copy only where its pixels are
    not packed)."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
