"""The quantization flow: fuse -> quantize_qat -> (train | calibrate) -> quantize.

Conversion maps come from class names: a float `nn.X` becomes `nn.qat.X`, a QAT `nn.qat.X`
becomes `nn.quantized.X`, and float leaves with an int8 twin (pooling, ReLU) become
`nn.quantized.X` too. Modules marked with `disable_quantize` stay float; in the int8
model they dequantize their inputs first.

>>> qat = quantize_qat(model, ema_fakequant_qconfig)      # uses model.fuse_groups()
>>> ...train qat, or: calibrate(qat, batches)
>>> int8 = quantize(qat)
"""
import copy

import numpy as np

from .. import nn
from ..autograd import no_grad
from ..nn.fused import fused_name, part_name
from .fake_quant import FakeQuantize
from .observer import Observer
from .qarray import dequantize_tensor
from .qconfig import ema_fakequant_qconfig
from ..tensor import as_tensor

_DISABLED = "quant_disabled"


def disable_quantize(module):
    """Keep `module` (and everything under it) in float; returns it."""
    module.__dict__[_DISABLED] = True
    return module


def _disabled(module):
    return module.__dict__.get(_DISABLED, False)


def _set(model, name, module):
    """Replace the submodule at dotted `name`, keeping its place in the parent's order."""
    parent_name, _, last = name.rpartition(".")
    parent = model.get_submodule(parent_name)
    if last not in parent._modules:
        raise KeyError(f"fuse: no submodule {name!r} in {type(model).__name__}")
    parent._modules[last] = module


def fuse(model, groups):
    """Replace each group (dotted names, e.g. ["conv1", "bn1", "relu"]) in place: the first
    becomes the float fused module (nn.ConvBnReLU2d, ...), the rest Identity. Returns model."""
    for group in groups:
        modules = [model.get_submodule(name) for name in group]
        if any(_disabled(m) for m in modules):
            continue
        cls = getattr(nn.fused, fused_name([part_name(m) for m in modules]), None)
        if cls is None or len(group) < 2:
            raise ValueError(f"fuse: cannot fuse group {group} "
                             f"({[type(m).__name__ for m in modules]})")
        fused = cls(*modules)
        fused.training = modules[0].training  # an eval model stays in eval mode
        _set(model, group[0], fused)
        for name in group[1:]:
            _set(model, name, nn.Identity().train(fused.training))
    return model


def _is_float(module):
    path = type(module).__module__
    return path.startswith(nn.__name__ + ".") and not path.startswith(
        (nn.qat.__name__, nn.quantized.__name__))


def _swap(module, convert):
    """Depth-first: each child that `convert` maps is replaced, others are descended into."""
    for name, child in list(module._modules.items()):
        if child is None or _disabled(child):
            continue
        new = convert(child)
        if new is None:
            _swap(child, convert)
        else:
            module._modules[name] = new
    return module


# float layers that run on int8 activations as they are (views of the values)
_RUN_ON_INT8 = ("Identity", "Flatten", "Dropout", "QuantStub", "DequantStub")


def sequential_groups(model):
    """The fusable runs of consecutive children in every nn.Sequential of `model` (conv ->
    BN -> ReLU/ReLU6, conv -> BN, conv -> ReLU, linear -> ReLU, BN -> ReLU; conv also a
    ConvTranspose2d), as dotted-name groups for `fuse`: a user's own model quantizes without
    writing its groups. Longest match first."""
    groups = []
    for prefix, module in model.named_modules():
        if type(module) is not nn.Sequential:
            continue
        children = list(module._modules.items())
        i = 0
        while i < len(children):
            for length in (3, 2):
                run = children[i:i + length]
                names = [part_name(m) for _, m in run]
                if len(run) == length and _fusable(names):
                    groups.append([f"{prefix}.{k}" if prefix else k for k, _ in run])
                    i += length
                    break
            else:
                i += 1
    return groups


def _fusable(names):
    try:
        name = fused_name(names)
    except ValueError:
        return False
    return hasattr(nn.fused, name) and hasattr(nn.qat, name)


def quantize_qat(model, qconfig=ema_fakequant_qconfig, groups=None, inplace=False,
                 islands=None):
    """Float model -> QAT model: fuse `groups` (default `model.fuse_groups()`, else the
    fusable runs of its Sequentials: `sequential_groups`), then swap every float layer with
    a QAT twin (nn.qat.<same name>) built by `from_float`. `islands` (default: for a model
    without `fuse_groups`, a user's own): a float leaf layer with no int8 form is wrapped in
    nn.qat.FloatIsland, which `quantize` runs in float between int8 layers (dequantizing
    its input, quantizing its output at the scale QAT observed) instead of failing there."""
    model = model if inplace else copy.deepcopy(model)
    own = not hasattr(model, "fuse_groups")
    if groups is None:
        groups = sequential_groups(model) if own else model.fuse_groups()
    fuse(model, groups or [])
    islands = own if islands is None else islands

    def to_qat(child):
        name = type(child).__name__
        if not _is_float(child):
            return None
        if hasattr(nn.qat, name):
            return getattr(nn.qat, name).from_float(child, qconfig)
        if (islands and not child._modules and name not in _RUN_ON_INT8
                and not hasattr(nn.quantized, name)):
            return nn.qat.FloatIsland.from_float(child, qconfig)
        return None
    return _swap(model, to_qat)


def _dequantize_inputs(module, args):
    return tuple(dequantize_tensor(a) for a in args)


# jit.trace records this pre-hook as dequantize steps before the module (a graph file holds
# no hooks): jit/record.py, Recorder.dequantized
_dequantize_inputs.graph_dequantize = True


def quantize(qat_model, inplace=False):
    """QAT (or calibrated) model -> int8 model in eval mode: weights quantized and packed
    once here; float layers kept by `disable_quantize` dequantize their inputs."""
    model = qat_model if inplace else copy.deepcopy(qat_model)
    model.eval()

    def to_int8(child):
        name = type(child).__name__
        if isinstance(child, nn.qat.QATModule):
            return getattr(nn.quantized, name).from_qat(child)
        if _is_float(child) and hasattr(nn.quantized, name) and not child._modules:
            return getattr(nn.quantized, name).from_float(child)
        return None
    _swap(model, to_int8)
    for module in model.modules():
        if _disabled(module):
            module.register_forward_pre_hook(_dequantize_inputs)
    # channels-last where every conv takes that engine, which reads uint8 (int8 activations,
    # int8_symmetric_qconfig, stay NCHW)
    convs = [m for m in model.modules() if isinstance(m, nn.quantized.Conv2d)]
    unsigned = all(m.out_dtype == np.uint8 for m in model.modules()
                   if isinstance(m, nn.quantized.QuantizedModule) and "scale" in m._buffers)
    if carries_channels_last(convs) and unsigned:
        for conv in convs:
            conv.channels_last = True
    return model.eval()


def carries_channels_last(convs):
    """Whether an int8 model of these convs (float, QAT or int8 modules) carries its
    activations channels-last (`nn.quantized.Conv2d.channels_last`): where every conv takes
    the channels-last engine (groups 1; depthwise and grouped convs read NCHW) and fills its
    tile (64 output channels or more: with 16 or 32 a tile runs 6 or 12 accumulators, and a
    small net loses to NCHW)."""
    return bool(convs) and all(conv.groups == 1 and conv.out_channels >= 64 for conv in convs)


def _set_flag(model, kind, attr, value):
    for module in model.modules():
        if isinstance(module, kind):
            setattr(module, attr, value)
    return model


def enable_observer(model, enabled=True):
    """Force every observer on (enabled=True), off (False) or back to 'training only' (None)."""
    return _set_flag(model, Observer, "enabled", enabled)


def disable_observer(model):
    return enable_observer(model, False)


def enable_fake_quant(model, enabled=True):
    return _set_flag(model, FakeQuantize, "enabled", enabled)


def disable_fake_quant(model):
    return enable_fake_quant(model, False)


def calibrate(model, batches, forward=None):
    """Post-training calibration: run `batches` (Tensors, arrays or (x, ...) tuples) through
    the eval-mode model with observers on and fake quant off; then observers go back to
    'training only' and fake quant on, so the model simulates int8. `forward(model, batch)`
    runs one batch instead (a detector's list of images, a GAN's noise: an evaluator's
    `forward`). Returns model."""
    model.eval()
    enable_observer(model, True)
    disable_fake_quant(model)
    with no_grad():
        for batch in batches:
            if forward is not None:
                forward(model, batch)
                continue
            x = batch[0] if isinstance(batch, (tuple, list)) else batch
            model(as_tensor(x))
    enable_observer(model, None)
    enable_fake_quant(model)
    return model
