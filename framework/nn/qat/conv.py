"""QAT convolutions: Conv2d, ConvReLU2d, ConvReLU62d, and the BN-folding ConvBn2d,
ConvBnReLU2d, ConvBnReLU62d.

BN folding (Jacob et al. 2018, sec. 3.2; PyTorch's `_ConvBnNd` scheme): with
``f = gamma / sqrt(running_var + eps)`` per output channel,

- training: ``y = conv(x, fq(W * f)) * (1 / f) (+ b)``, then BN with the *batch* statistics
  (which also updates the running ones); without a conv bias the division runs inside the
  batch norm's passes (``F.batch_norm``'s ``input_scale``). The conv sees the weights the
  int8 model will use; dividing by f and re-normalising with batch stats equals multiplying
  the folded output by ``sqrt(running_var + eps) / sqrt(batch_var + eps)`` plus the batch
  shift, so training is stable while the weight quantization is the deployed one;
- eval: ``y = conv(x, fq(W * f)) + beta + (b - running_mean) * f``, exactly what
  `nn.quantized.ConvBn2d` computes in int8 (weights ``W * f``, bias folded). A
  FrozenBatchNorm2d's statistics never change, so with one the eval form trains too.
"""
import numpy as np

from ... import _C
from ... import functional as F
from ...ops import norm as N
from ...quantization import reference as R
from ...tensor import Tensor
from .. import conv as float_conv
from ..fused import part_name
from ..norm import FrozenBatchNorm2d
from .module import QATModule


_CLAMPS = {"relu": (0.0, np.inf), "relu6": (0.0, 6.0)}


def activate(y, activation):
    if activation == "relu":
        return F.relu(y)
    if activation == "relu6":
        return F.relu6(y)
    return y


EXACT_FLOAT32 = 2.0 ** 24   # integers below this add exactly in float32


def exact_chunks(qx, zx, qw):
    """(x - zx, w) as float32 arrays and the input-channel chunks [(start, stop), ...] over
    which a float32 conv of them sums exactly: integer products and sums are exact in float32
    below 2**24, and no partial sum of a chunk (in any order, any blocking) exceeds
    max|x - zx| * max over output channels of the chunk's sum|w|. (None, None, None) where
    one input channel alone may reach 2**24 (kernels of over ~500 taps)."""
    x = qx.astype(np.float32) - np.float32(zx)
    w = qw.astype(np.float32)
    reach = np.abs(w).reshape(w.shape[0], w.shape[1], -1).sum(2) * float(
        np.abs(x).max(initial=0.0))                                     # (OC, C)
    chunks, start, total = [], 0, np.zeros(w.shape[0])
    for c in range(w.shape[1]):
        if (total + reach[:, c]).max(initial=0.0) >= EXACT_FLOAT32:
            if c == start:
                return None, None, None
            chunks.append((start, c))
            start, total = c, np.zeros(w.shape[0])
        total += reach[:, c]
    chunks.append((start, w.shape[1]))
    return x, w, chunks


def conv_padding(module):
    """Module padding (int pair or 'valid'/'same') -> (top, bottom, left, right)."""
    if not isinstance(module.padding, str):
        ph, pw = module.padding
        return (ph, ph, pw, pw)
    if module.padding == "valid":
        return (0, 0, 0, 0)
    total = [d * (k - 1) for d, k in zip(module.dilation, module.kernel_size)]
    return (total[0] // 2, total[0] - total[0] // 2, total[1] // 2, total[1] - total[1] // 2)


class Conv2d(float_conv.Conv2d, QATModule):
    activation = None

    def conv(self, x, w, b):
        return F.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups)

    def conv_weight(self):
        """The weight as (OC, C/groups, kh, kw): the layout quantized per output channel."""
        return self.weight

    def folded(self):
        """(weight, bias) Tensors the int8 model quantizes (eval-mode values)."""
        return self.conv_weight(), self.bias

    def forward(self, x):
        return self.int8_twin(x, self.float_forward, self.int8_sums)

    def float_forward(self, x):
        w, b = self.folded()
        y = self.conv(x, self.fake_quant_weight(w), b)
        return self.fake_quant_act(activate(y, self.activation))

    def int8_sums(self, qx, zx, qw):
        """The int32 sums of the int8 conv, exactly: on the float32 GEMM conv over input-channel
        chunks each exact in float32 (`exact_chunks`; their exact integer results added in
        float64), the depthwise kernel for depthwise convs (9 taps: always exact), else
        reference.conv2d (float64 matmuls on numpy's BLAS)."""
        padding = conv_padding(self)
        if self.groups == 1:
            x, w, chunks = exact_chunks(qx, zx, qw)
            if chunks is not None:
                acc = None
                for a, b in chunks:
                    part = _C.conv2d_gemm(np.ascontiguousarray(x[:, a:b]),
                                          np.ascontiguousarray(w[:, a:b]), None, None,
                                          self.stride, padding, self.dilation)
                    acc = part.astype(np.float64) if acc is None else acc + part
                return acc.astype(np.int64)
        if self.groups == qx.shape[1] == qw.shape[0] and qw.shape[1] == 1:
            x, w, chunks = exact_chunks(qx, zx, qw)
            if chunks is not None:
                return _C.depthwise_conv2d(x, w, None, self.stride, padding,
                                           self.dilation).astype(np.int64)
        return R.conv2d(qx, zx, qw, self.stride, padding, self.dilation, self.groups)


class ConvReLU2d(Conv2d):
    activation = "relu"


class ConvReLU62d(Conv2d):
    activation = "relu6"


class BnFolding:
    """The BN folding of the module docstring, for a conv class after it in the bases (its
    weight in the conv layout (OC, C/groups, kh, kw) from `conv_weight`)."""

    def attach_fused(self, parts):
        if len(parts) < 1 or part_name(parts[0]) != "BatchNorm2d":
            raise TypeError(f"{type(self).__name__}: expected a BatchNorm2d after the conv")
        super().attach_fused(parts[1:])
        self.bn = parts[0]

    def _factor(self):
        """f = gamma / sqrt(running_var + eps), (OC,) Tensor (gamma learnable)."""
        bn = self.bn
        inv = Tensor((1.0 / np.sqrt(bn.running_var.data + bn.eps)).astype(np.float32))
        return inv if bn.weight is None else bn.weight * inv

    def _scaled_weight(self, f):
        """W * f per output channel: W as (1, OC, rest) through ChannelAffine, whose forward
        and backward run on the batch-norm kernels in parallel (numpy's broadcast multiply and
        its two gradients cost more; bench/RESULTS.md, training: QAT), the same values."""
        w = self.conv_weight()
        zero = Tensor(np.zeros(w.shape[0], w.dtype))
        flat = N.ChannelAffine.apply(F.reshape(w, (1, w.shape[0], -1)), f, zero)
        return F.reshape(flat, w.shape)

    def folded(self):
        bn, f = self.bn, self._factor()
        w = self._scaled_weight(f)
        b = Tensor(-bn.running_mean.data) if self.bias is None else self.bias - bn.running_mean
        b = b * f
        return w, (b if bn.bias is None else b + bn.bias)

    def forward(self, x):
        if not self.training or isinstance(self.bn, FrozenBatchNorm2d):
            return super().forward(x)   # folded with the running statistics
        f = self._factor()
        w = self.fake_quant_weight(self._scaled_weight(f))
        y = self.conv(x, w, None)                                 # (N, OC, H, W), unscaled
        bn = self.bn
        free = not (bn._forward_pre_hooks or bn._forward_hooks)  # no hook sees its output
        if self.bias is None and free:
            # y / f normalised in the batch norm's own passes (F.batch_norm's input_scale),
            # with the activation's clamp, not in passes of their own (bench/RESULTS.md, QAT)
            return self._bn_fake_quant(y, clamp=_CLAMPS.get(self.activation),
                                       input_scale=1.0 / f)
        y = N.ChannelAffine.apply(y, 1.0 / f, Tensor(np.zeros(y.shape[1], y.dtype)))  # / f
        if self.bias is not None:
            y = y + F.reshape(self.bias, (1, -1, 1, 1))
        if self.activation in _CLAMPS and free:
            # the activation in the batch norm's passes (F.batch_norm's clamp), same bits
            return self._bn_fake_quant(y, clamp=_CLAMPS[self.activation])
        return self.fake_quant_act(activate(bn(y), self.activation))

    def _bn_fake_quant(self, y, **kwargs):
        """fake_quant_act(self.bn.forward(y, **kwargs)), the activation's observer and fake
        quantization in the batch norm's node where act_straight_through allows (the range
        from its statistics' pass, the fake-quantized output from its affine pass, the mask in
        its backward: bench/RESULTS.md, training: QAT)."""
        ste = self.act_straight_through()
        if ste is None:
            return self.fake_quant_act(self.bn.forward(y, **kwargs))
        return self.fake_quantized(self.bn.forward(y, ste=ste, **kwargs), ste)


class ConvBn2d(BnFolding, Conv2d):
    pass


class ConvBnReLU2d(ConvBn2d):
    activation = "relu"


class ConvBnReLU62d(ConvBn2d):
    activation = "relu6"
