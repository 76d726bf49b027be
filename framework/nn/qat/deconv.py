"""QAT transposed convolutions: ConvTranspose2d, ConvTransposeReLU2d and the BN-folding
ConvTransposeBn2d, ConvTransposeBnReLU2d (the DCGAN generators' ConvTranspose-BN-ReLU).

ConvTranspose2d keeps its weight as (C, OC/groups, kh, kw): output channel ``g * OC/groups +
o`` is column o of group g's rows. Weights are fake-quantized per *output* channel, so the
observer, the fake quantizer and the BN folding (qat/conv.py's module docstring) all see the
weight in the conv layout (OC, C/groups, kh, kw) (`conv_layout`), and the transposed conv
reads it back (`deconv_layout`): both are permutations, so the values are exactly the ones
`nn.quantized.ConvTranspose2d` quantizes.
"""
import numpy as np

from ... import functional as F
from ...autograd import no_grad
from ...quantization import reference as R
from ...tensor import Tensor
from .. import conv as float_conv
from .conv import BnFolding, activate, exact_chunks
from .module import QATModule


def conv_layout(w, groups):
    """(C, OC/groups, kh, kw) -> (OC, C/groups, kh, kw), a Tensor or numpy array: within
    each group the first two axes swapped, so the same call maps back (`deconv_layout`)."""
    a, b, kh, kw = w.shape
    grouped = w.reshape(groups, a // groups, b, kh, kw)
    moved = (F.permute(grouped, 0, 2, 1, 3, 4) if hasattr(grouped, "requires_grad")
             else grouped.transpose(0, 2, 1, 3, 4))
    return moved.reshape(groups * b, a // groups, kh, kw)


deconv_layout = conv_layout   # (OC, C/groups, kh, kw) -> (C, OC/groups, kh, kw): its own inverse


class ConvTranspose2d(float_conv.ConvTranspose2d, QATModule):
    activation = None

    def conv(self, x, w, b):
        """The transposed conv of x with w in the conv layout (OC, C/groups, kh, kw)."""
        return F.conv_transpose2d(x, deconv_layout(w, self.groups), b, self.stride,
                                  self.padding, self.output_padding, self.groups,
                                  self.dilation)

    def conv_weight(self):
        """The weight in the conv layout (OC, C/groups, kh, kw), quantized per axis 0."""
        return conv_layout(self.weight, self.groups)

    def folded(self):
        """(weight in the conv layout, bias) the int8 model quantizes (eval-mode values)."""
        return self.conv_weight(), self.bias

    def forward(self, x):
        return self.int8_twin(x, self.float_forward, self.int8_sums)

    def float_forward(self, x):
        w, b = self.folded()
        y = self.conv(x, self.fake_quant_weight(w), b)
        return self.fake_quant_act(activate(y, self.activation))

    def int8_sums(self, qx, zx, qw):
        """The int32 sums of the int8 transposed conv, exactly: the float32 transposed conv
        over input-channel chunks each exact in float32 (qat/conv.py's `exact_chunks`: every
        output sums a subset of the same terms), else reference.conv_transpose2d."""
        if self.groups == 1:
            x, w, chunks = exact_chunks(qx, zx, qw)
            if chunks is not None:
                w = deconv_layout(w, 1)
                acc = None
                with no_grad():
                    for a, b in chunks:
                        part = F.conv_transpose2d(
                            Tensor(np.ascontiguousarray(x[:, a:b])),
                            Tensor(np.ascontiguousarray(w[a:b])), None, self.stride,
                            self.padding, self.output_padding, 1, self.dilation).numpy()
                        acc = part.astype(np.float64) if acc is None else acc + part
                return acc.astype(np.int64)
        return R.conv_transpose2d(qx, zx, deconv_layout(qw, self.groups), self.stride,
                                  self.padding, self.output_padding, self.dilation, self.groups)


class ConvTransposeReLU2d(ConvTranspose2d):
    activation = "relu"


class ConvTransposeBn2d(BnFolding, ConvTranspose2d):
    pass


class ConvTransposeBnReLU2d(ConvTransposeBn2d):
    activation = "relu"
