"""Convolutions: argument checks, then the Conv2d / ConvTranspose2d primitives.

>>> import tianyuan as ty, tianyuan.functional as F
>>> F.conv2d(ty.randn(2, 3, 8, 8), ty.randn(16, 3, 3, 3), padding=1).shape
(2, 16, 8, 8)
"""
import numpy as np

from ..autograd import is_grad_enabled
from ..ops import conv as C
from ..ops.conv_ref import conv_out_size
from ..tensor import Tensor, as_tensor
from ._args import image_tensor, padding4, pair


def _check_weight_bias(x, weight, bias, op):
    image_tensor(weight, op, "weight")
    if weight.dtype != x.dtype:
        raise TypeError(f"{op}: input is {x.dtype} but weight is {weight.dtype}, input {x.shape}, "
                        f"weight {weight.shape}")
    if bias is not None:
        out_channels = weight.shape[0] if op == "conv2d" else None
        if bias.ndim != 1 or (out_channels is not None and bias.shape[0] != out_channels):
            raise ValueError(f"{op}: bias must have shape ({out_channels},), got {bias.shape} "
                             f"(weight {weight.shape})")
        if bias.dtype != x.dtype:
            raise TypeError(f"{op}: input is {x.dtype} but bias is {bias.dtype}")


def _same_padding(kernel, dilation, stride, op):
    if stride != (1, 1):
        raise ValueError(f"{op}: padding='same' needs stride 1, got stride {stride}")
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return totals[0] // 2, totals[0] - totals[0] // 2, totals[1] // 2, totals[1] - totals[1] // 2


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation. x (N, C, H, W); weight (Co, C/groups, kh, kw); bias (Co,).

    padding: int, (ph, pw), (top, bottom, left, right), 'valid' or 'same' (stride 1; the
    odd pixel goes to the bottom/right). groups == C with Co = k*C is depthwise.
    """
    stride, pads, dilation = _conv2d_geometry(x, weight, bias, stride, padding, dilation, groups,
                                              "conv2d")
    args = (x, weight) if bias is None else (x, weight, bias)
    return C.Conv2d.apply(*args, stride=stride, padding=pads, dilation=dilation, groups=groups)


# act of conv2d_affine_act -> ops.conv.conv2d_inference's code
ACTIVATION_CODES = {None: 0, "relu": 1, "relu6": 2}


def conv2d_affine_act(x, weight, scale=None, shift=None, act=None, stride=1, padding=0,
                      dilation=1, groups=1):
    """Inference only (no autograd): act(scale * conv2d(x, weight) + shift) per output
    channel, with scale and shift (Co,) or None and act None, 'relu' or 'relu6' — a frozen
    conv + batch norm + activation, as one kernel where the convolution runs on gemm_direct.

    >>> y = F.conv2d_affine_act(x, w, bn_scale, bn_shift, "relu", padding=1)  # doctest: +SKIP
    """
    op = "conv2d_affine_act"
    if act not in ACTIVATION_CODES:
        raise ValueError(f"{op}: act must be None, 'relu' or 'relu6', got {act!r}")
    if is_grad_enabled() and any(t.requires_grad for t in (x, weight) if isinstance(t, Tensor)):
        raise RuntimeError(f"{op}: inference only; run it under tianyuan.no_grad() (input "
                           f"{x.shape}, weight {weight.shape})")
    x, weight = as_tensor(x), as_tensor(weight)
    stride, pads, dilation = conv2d_affine_act_geometry(x, weight, stride, padding, dilation,
                                                        groups)
    vectors = []
    for v, name in ((scale, "scale"), (shift, "shift")):
        if v is not None:
            v = np.ascontiguousarray(v.numpy() if isinstance(v, Tensor) else v, x.dtype)
            if v.shape != (weight.shape[0],):
                raise ValueError(f"{op}: {name} must have shape ({weight.shape[0]},), got "
                                 f"{v.shape} (weight {weight.shape})")
        vectors.append(v)
    out = C.conv2d_inference(x.numpy(), weight.numpy(), *vectors, ACTIVATION_CODES[act],
                             stride, pads, dilation, groups)
    return Tensor(out)


def conv2d_affine_act_geometry(x, weight, stride=1, padding=0, dilation=1, groups=1):
    """conv2d_affine_act's checked (stride, (top, bottom, left, right) padding, dilation) for
    this input and weight: a caller that runs many calls of one shape (nn.fused) checks once
    and passes them to ops.conv.conv2d_inference itself."""
    return _conv2d_geometry(as_tensor(x), as_tensor(weight), None, stride, padding, dilation,
                            groups, "conv2d_affine_act")


def _conv2d_geometry(x, weight, bias, stride, padding, dilation, groups, op):
    """Checked (stride, (top, bottom, left, right) padding, dilation) of a 2-D convolution."""
    image_tensor(x, op)
    _check_weight_bias(x, weight, bias, op)
    stride, dilation = pair(stride, "stride", op, 1), pair(dilation, "dilation", op, 1)
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    n, c, h, w = x.shape
    co, cg, kh, kw = weight.shape
    if c != cg * groups:
        raise ValueError(f"{op}: input has {c} channels but weight expects {cg * groups} "
                         f"(groups={groups}), input {x.shape}, weight {weight.shape}")
    if co % groups:
        raise ValueError(f"{op}: weight has {co} output channels, not divisible by "
                         f"groups={groups} (weight {weight.shape})")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"{op}: padding must be an int, a pair, a 4-tuple, 'same' or "
                             f"'valid', got {padding!r}")
        pads = (0, 0, 0, 0) if padding == "valid" else _same_padding((kh, kw), dilation, stride, op)
    else:
        pads = padding4(padding, op)
    oh = conv_out_size(h, kh, stride[0], pads[0], pads[1], dilation[0])
    ow = conv_out_size(w, kw, stride[1], pads[2], pads[3], dilation[1])
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: kernel ({kh}, {kw}) with dilation {dilation} does not fit the "
                         f"padded input: input {x.shape}, padding (top, bottom, left, right) "
                         f"{pads}, weight {weight.shape}")
    return stride, pads, dilation


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed convolution (the input-gradient of conv2d). x (N, Ci, H, W); weight
    (Ci, Co/groups, kh, kw); bias (Co,). Output size per axis:
    (H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
    """
    op = "conv_transpose2d"
    image_tensor(x, op)
    _check_weight_bias(x, weight, bias, op)
    stride, dilation = pair(stride, "stride", op, 1), pair(dilation, "dilation", op, 1)
    output_padding = pair(output_padding, "output_padding", op)
    pads = padding4(padding, op)
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    n, ci, h, w = x.shape
    wi, cog, kh, kw = weight.shape
    if ci != wi or ci % groups:
        raise ValueError(f"{op}: input has {ci} channels but weight expects {wi} "
                         f"(groups={groups}, must divide it), input {x.shape}, "
                         f"weight {weight.shape}")
    if bias is not None and bias.shape[0] != cog * groups:
        raise ValueError(f"{op}: bias must have shape ({cog * groups},), got {bias.shape} "
                         f"(weight {weight.shape}, groups={groups})")
    for o, s, d in zip(output_padding, stride, dilation):
        if o >= s and o >= d:
            raise ValueError(f"{op}: output_padding {output_padding} must be smaller than "
                             f"stride {stride} or dilation {dilation}")
    oh = (h - 1) * stride[0] - pads[0] - pads[1] + dilation[0] * (kh - 1) + output_padding[0] + 1
    ow = (w - 1) * stride[1] - pads[2] - pads[3] + dilation[1] * (kw - 1) + output_padding[1] + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: output size ({oh}, {ow}) is not positive: input {x.shape}, "
                         f"weight {weight.shape}, stride {stride}, padding {pads}")
    args = (x, weight) if bias is None else (x, weight, bias)
    return C.ConvTranspose2d.apply(*args, stride=stride, padding=pads,
                                   output_padding=output_padding, dilation=dilation, groups=groups)
