"""Conv2d and ConvTranspose2d with PyTorch's parameter names, shapes and initialisation.

Conv2d weight is (out, in / groups, kh, kw); ConvTranspose2d weight is (in, out / groups, kh, kw).
"""
import numpy as np

from .. import functional as F
from .linear import reset_fan_in_uniform
from .module import Module
from .parameter import Parameter


def _pair(value, name, op):
    if isinstance(value, int):
        return (value, value)
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f"{op}: {name} must be an int or a pair, got {value}")
    return value


class _Conv2dBase(Module):
    def __init__(self, op, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 groups, bias, weight_shape_fn):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{op}: in_channels={in_channels} and out_channels={out_channels} "
                             f"must both be divisible by groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _pair(kernel_size, "kernel_size", op)
        self.stride = _pair(stride, "stride", op)
        self.dilation = _pair(dilation, "dilation", op)
        self.padding = padding if isinstance(padding, str) else _pair(padding, "padding", op)
        self.weight = Parameter(np.empty(weight_shape_fn() + self.kernel_size, np.float32))
        if bias:
            self.bias = Parameter(np.empty((out_channels,), np.float32))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        reset_fan_in_uniform(self.weight, self.bias)

    def extra_repr(self):
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding not in ((0, 0), "valid"):
            text += f", padding={self.padding}"
        if self.dilation != (1, 1):
            text += f", dilation={self.dilation}"
        if getattr(self, "output_padding", (0, 0)) != (0, 0):
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        return text


class Conv2d(_Conv2dBase):
    """2-D convolution over (N, C_in, H, W). padding: an int, a pair, 'valid' or 'same'
    ('same' needs stride 1)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros"):
        if padding_mode != "zeros":
            raise ValueError("Conv2d: only padding_mode='zeros' is supported, got "
                             f"{padding_mode!r}")
        super().__init__("Conv2d", in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, bias, lambda: (out_channels, in_channels // groups))
        self.padding_mode = padding_mode
        if isinstance(self.padding, str):
            self._check_string_padding()

    def _check_string_padding(self):
        # F.conv2d resolves 'same' (odd total: the extra row/column at the end, as PyTorch)
        if self.padding not in ("valid", "same"):
            raise ValueError("Conv2d: padding string must be 'valid' or 'same', got "
                             f"{self.padding!r}")
        if self.padding == "same" and self.stride != (1, 1):
            raise ValueError(f"Conv2d: padding='same' needs stride 1, got stride {self.stride}")

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class ConvTranspose2d(_Conv2dBase):
    """Transposed 2-D convolution (the gradient of Conv2d with respect to its input)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros"):
        if padding_mode != "zeros":
            raise ValueError("ConvTranspose2d: only padding_mode='zeros' is supported, got "
                             f"{padding_mode!r}")
        if isinstance(padding, str):
            raise ValueError(f"ConvTranspose2d: padding must be an int or a pair, got {padding!r}")
        self_output_padding = _pair(output_padding, "output_padding", "ConvTranspose2d")
        super().__init__("ConvTranspose2d", in_channels, out_channels, kernel_size, stride,
                         padding, dilation, groups, bias,
                         lambda: (in_channels, out_channels // groups))
        self.output_padding = self_output_padding
        self.padding_mode = padding_mode

    def forward(self, x):
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)
