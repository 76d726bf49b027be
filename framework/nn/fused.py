"""Float fused modules: a conv (or linear) followed by BN and/or an activation, as one module.

`tianyuan.quantization.fuse` puts them in place of a group of layers (the first layer of
the group becomes the fused module, the others `Identity`); in float they run their
parts in order. Their names are the parts' short names, so the QAT and int8 twins in
`nn.qat` and `nn.quantized` are found by name: Conv2d + BatchNorm2d + ReLU6 ->
``ConvBnReLU62d``.

>>> fused = ConvBnReLU2d(Conv2d(3, 8, 3), BatchNorm2d(8), ReLU())
"""
from .. import functional as F
from ..autograd import is_grad_enabled
from ..functional.conv import ACTIVATION_CODES, conv2d_affine_act_geometry
from ..functional.normalization import eval_affine_arrays
from ..ops import conv as C
from ..tensor import Tensor, as_tensor
from .container import Sequential

SHORT_NAMES = {"Conv2d": "Conv", "ConvTranspose2d": "ConvTranspose", "BatchNorm2d": "Bn",
               "ReLU": "ReLU", "ReLU6": "ReLU6", "Linear": "Linear"}


def part_name(module):
    """The class name `module` fuses as: its own, or its class's `fuse_as` (a
    FrozenBatchNorm2d fuses as a BatchNorm2d whose statistics never change)."""
    return getattr(type(module), "fuse_as", type(module).__name__)


def fused_name(names):
    """Class names ['Conv2d', 'BatchNorm2d', 'ReLU'] -> 'ConvBnReLU2d'; ['Linear', 'ReLU'] ->
    'LinearReLU'."""
    if len(names) == 1:
        return names[0]
    if any(n not in SHORT_NAMES for n in names):
        raise ValueError(f"fuse: cannot fuse {names}; fusible parts are {sorted(SHORT_NAMES)}")
    suffix = "2d" if names[0] in ("Conv2d", "ConvTranspose2d", "BatchNorm2d") else ""
    return "".join(SHORT_NAMES[n] for n in names) + suffix


class Fused(Sequential):
    """Children 0 (conv/linear), then 1, 2 (BN and/or activation), run in order — except a
    conv group in eval mode under no_grad, which runs as one convolution with the frozen BN
    folded into a per-channel scale and shift and the activation in its store
    (F.conv2d_affine_act, whose argument checks it runs once per input shape)."""

    parts = ()
    graph_leaf = True   # jit.trace records it as one step (its children are its parts)

    def __init__(self, *modules):
        got = tuple(part_name(m) for m in modules)
        if got != self.parts:
            raise TypeError(f"{type(self).__name__}: expected modules {self.parts}, got {got}")
        super().__init__(*modules)

    def forward(self, x):
        if self.training or is_grad_enabled() or self.parts[0] != "Conv2d":
            return super().forward(x)
        folded = _frozen_affine(self)
        if folded is None:   # a BN without running statistics normalises by the batch
            return super().forward(x)
        conv = next(iter(self._modules.values()))
        weight = conv._parameters["weight"]
        scale, shift, act = folded
        x = as_tensor(x)
        dtype = weight.dtype
        if x.dtype != dtype or any(v is not None and v.dtype != dtype for v in (scale, shift)):
            return F.conv2d_affine_act(x, weight, *folded, stride=conv.stride,
                                       padding=conv.padding, dilation=conv.dilation,
                                       groups=conv.groups)
        # F.conv2d_affine_act's checks once per input shape and geometry, not per call
        # (bench/RESULTS.md, Python overheads)
        key = (x.shape, dtype, weight.shape, conv.stride, conv.padding, conv.dilation,
               conv.groups)
        plan = self.__dict__.get("_plan")
        if plan is None or plan[0] != key:
            plan = key, conv2d_affine_act_geometry(x, weight, conv.stride, conv.padding,
                                                   conv.dilation, conv.groups)
            self.__dict__["_plan"] = plan
        out = C.conv2d_inference(x.data, weight.data, scale, shift, ACTIVATION_CODES[act],
                                 *plan[1], conv.groups)
        return Tensor._make(out, False, None)


    def graph_step(self, x):
        """For `jit.trace` (eval): the one folded convolution as a function of the input's
        array, the BN's affine and the checks done once; None where forward runs the parts
        in turn (a linear group, a BN without running statistics, mixed dtypes)."""
        if self.training or self.parts[0] != "Conv2d":
            return None
        folded = _frozen_affine(self)
        conv = next(iter(self._modules.values()))
        weight = conv._parameters["weight"]
        if folded is None or x.dtype != weight.dtype or any(
                v is not None and v.dtype != weight.dtype for v in folded[:2]):
            return None
        scale, shift, act = folded
        code, groups, plans = ACTIVATION_CODES[act], conv.groups, {}

        def run(a):
            plan = plans.get(a.shape)
            if plan is None:    # once per input shape (a graph for any batch meets several)
                plan = plans[a.shape] = conv2d_affine_act_geometry(
                    Tensor._make(a, False, None), weight, conv.stride, conv.padding,
                    conv.dilation, groups)
            return C.conv2d_inference(a, weight.data, scale, shift, code, *plan, groups)
        return run


_ACTS = {"ReLU": "relu", "ReLU6": "relu6"}


def _frozen_affine(fused):
    """(scale or None, shift or None, act) of conv bias + eval BN + activation: the BN's
    eval affine (F.batch_norm's own) with the conv bias moved through it; None when the BN
    has no running statistics. Per call: it reads the parts' tables directly, not through
    Module.__getattr__ (most of this function's time had been those look-ups)."""
    parts = fused.parts
    modules = list(fused._modules.values())
    conv = modules[0]
    shift = conv._parameters.get("bias")
    shift = None if shift is None else shift.data
    if "BatchNorm2d" not in parts:
        return None, shift, _ACTS.get(parts[-1])
    bn = modules[parts.index("BatchNorm2d")]
    mean, var = bn._buffers.get("running_mean"), bn._buffers.get("running_var")
    if mean is None or var is None:
        return None
    # a BatchNorm2d's affine is parameters, a FrozenBatchNorm2d's buffers
    weight, bias = (bn._parameters.get(k, bn._buffers.get(k)) for k in ("weight", "bias"))
    scale, shift = eval_affine_arrays(conv._parameters["weight"].dtype, mean.data, var.data,
                                      None if weight is None else weight.data,
                                      None if bias is None else bias.data, bn.eps, shift)
    return scale, shift, _ACTS.get(parts[-1])


def _fused_class(*parts):
    name = fused_name(parts)
    return type(name, (Fused,), {"parts": parts, "__doc__": " + ".join(parts) + " (float)."})


ConvBn2d = _fused_class("Conv2d", "BatchNorm2d")
ConvBnReLU2d = _fused_class("Conv2d", "BatchNorm2d", "ReLU")
ConvBnReLU62d = _fused_class("Conv2d", "BatchNorm2d", "ReLU6")
ConvReLU2d = _fused_class("Conv2d", "ReLU")
ConvReLU62d = _fused_class("Conv2d", "ReLU6")
LinearReLU = _fused_class("Linear", "ReLU")
# the generators' upsampling (zoo/gan/cnn32.py): run as their parts in turn, in float
ConvTransposeBn2d = _fused_class("ConvTranspose2d", "BatchNorm2d")
ConvTransposeBnReLU2d = _fused_class("ConvTranspose2d", "BatchNorm2d", "ReLU")
ConvTransposeReLU2d = _fused_class("ConvTranspose2d", "ReLU")
# a BN with no conv before it (the generators' BN-ReLU before an upsampling): int8 as a
# depthwise 1x1 conv (nn/qat/norm.py)
BnReLU2d = _fused_class("BatchNorm2d", "ReLU")
