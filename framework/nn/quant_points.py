"""Float modules that mark where a model quantizes: its ends and its multi-input ops.

A zoo model writes its residual adds and concats as these modules (not as `a + b` in
forward), and puts `QuantStub`/`DequantStub` at its ends. In float they are plain ops;
`tianyuan.quantization.quantize_qat` swaps each for the QAT module of the same name
(which observes and fake-quantizes its output), and `quantize` for the int8 one.

>>> self.add_relu = nn.AddReLU()          # in __init__
>>> out = self.add_relu(out, identity)     # in forward: relu(out + identity)
"""
import numpy as np

from .. import functional as F
from ..ops import elementwise as E
from ..tensor import Tensor
from .module import Module


class QuantStub(Module):
    """Float -> (fake-)quantized activation at a model's input; identity in float."""
    graph_alias = True  # jit.trace: returns its input itself

    def forward(self, x):
        return x


class DequantStub(Module):
    """(Fake-)quantized -> float at a model's output; identity in float."""
    graph_alias = True  # jit.trace: returns its input itself

    def forward(self, x):
        return x


class Add(Module):
    """a + b, as a module so its output gets its own quantization parameters."""

    def forward(self, a, b):
        return a + b


class AddReLU(Module):
    """relu(a + b): the residual add of ResNet-style blocks (float32 tensors of one shape:
    one native op, ops.elementwise.AddClamp, the same bits)."""

    def forward(self, a, b):
        if (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape
                and a.dtype == np.float32 and b.dtype == np.float32):
            return E.AddClamp.apply(a, b, lo=0.0, hi=np.inf)
        return F.relu(a + b)


class Concat(Module):
    """Concatenation along `axis`; quantized, its inputs are requantized to one scale.

    shuffle: interleave the parts' channels as well (axis 1, parts of one shape): the
    channel_shuffle with one group per part that ShuffleNetV2 applies after its concat, in
    the same copy (F.concat_shuffle; int8: each part requantized straight into its
    interleaved place).
    """

    def __init__(self, axis=1, shuffle=False):
        super().__init__()
        if shuffle and axis != 1:
            raise ValueError(f"Concat: shuffle interleaves channels (axis 1), got axis={axis}")
        self.axis, self.shuffle = axis, bool(shuffle)

    def join(self, tensors):
        return F.concat_shuffle(tensors) if self.shuffle else F.concat(list(tensors), self.axis)

    def forward(self, tensors):
        return self.join(tensors)

    def extra_repr(self):
        return f"axis={self.axis}" + (", shuffle=True" if self.shuffle else "")
