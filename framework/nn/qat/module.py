"""QATModule: the mixin every `nn.qat` class adds to its float parent.

A QAT class subclasses the float class of the same name (`qat.Conv2d(nn.Conv2d)`), so it
keeps the float parameters, names and forward arguments; `from_float` copies a float
module's state generically (its attribute dict, parameters shared) and attaches
observers and fake quantizers built from a QConfig:

- ``weight_observer`` / ``weight_fake_quant``: the (folded) weight, per output channel;
- ``act_observer`` / ``act_fake_quant``: the output activation, per tensor.

Eval mode is the int8 model, bit for bit. Training needs float fake quantization (its
straight-through gradients); evaluation does not, and a float32 sum of fake-quantized
values can land a step away from the int8 layer's exact int32 sum on a rounding boundary.
So in eval, with fake quantization on and no observer watching (after `calibrate`, or a
QAT model put in eval), a layer whose inputs carry their grid (``x.qparams``, which every
fake-quantized output has) computes what its int8 twin computes, in reference.py's numpy:
integer inputs and weights, exact int32 sums, the bias rounded at ``s_in * s_w``, the one
requantization rule; its output is those integers dequantized (and marked with their grid).
Evaluating the QAT model is then evaluating the int8 model, without converting it. With
gradients wanted in eval, the float result carries the integers' values forward and its own
gradient backward (as QAT average pooling does).
"""
from collections import OrderedDict

import numpy as np

from ...autograd import is_grad_enabled
from ...quantization import reference as R
from ...tensor import Tensor
from ..fused import Fused
from ..module import Module

_HOOKS = ("_forward_hooks", "_forward_pre_hooks")


def copy_state(dst, src):
    """dst takes src's attributes; parameter/buffer/module tables are copied (entries shared)."""
    for key, value in src.__dict__.items():
        if key in _HOOKS:
            continue
        if isinstance(value, (OrderedDict, dict, set)):
            value = type(value)(value)
        dst.__dict__[key] = value


class QATModule:
    """Mixin: `fake_quant_weight(w)` and `fake_quant_act(y)` observe, then fake-quantize."""

    with_weight = True

    def attach_quantizers(self, qconfig):
        if self.with_weight:
            self.weight_observer = qconfig.make_weight_observer()
            self.weight_fake_quant = qconfig.make_weight_fake_quant()
        self.act_observer = qconfig.make_act_observer()
        self.act_fake_quant = qconfig.make_act_fake_quant()
        self.qconfig = qconfig

    def fake_quant_weight(self, w):
        return self.weight_fake_quant(self.weight_observer(w), self.weight_observer)

    def fake_quant_act(self, y):
        out = self.act_fake_quant(self.act_observer(y), self.act_observer)
        if out is not y:
            out.qparams = self.act_qparams()   # lets QAT average pooling round as int8 does
        return out

    def act_straight_through(self):
        """fake_quant_act as fn(array) -> (array, gradient mask), for an op that runs it as the
        last step of its own autograd node (F.batch_norm's ste; mark its output with
        `fake_quantized(out, ste)`), or None: where the fake quantizer has no such form (a
        forward of its own, as LSQ's) or is off, or hooks watch it or the observer."""
        observer, fq = self.act_observer, self.act_fake_quant
        make = getattr(fq, "straight_through", None)
        if make is None or any(getattr(m, h) for m in (observer, fq) for h in _HOOKS):
            return None
        return make(observer)

    def fake_quantized(self, out, ste):
        """out, the output of an op that ran ste (act_straight_through's), marked as
        fake_quant_act marks its own: with the qparams ste used."""
        out.qparams = ste.qparams
        return out

    def int8_grids(self, *xs):
        """The inputs' grids (QParams, per tensor) when this layer computes its int8 twin's
        integers (the module docstring), else None."""
        if self.training or not self.act_fake_quant.enabled or self.act_observer.active():
            return None
        if self.with_weight and not self.weight_fake_quant.enabled:
            return None   # (the weight observer may watch: it follows the weights as they are)
        grids = [getattr(x, "qparams", None) for x in xs]
        if any(p is None or p.axis is not None or np.ndim(p.scale) != 0 for p in grids):
            return None
        return grids

    def int8_output(self, q, p, y=None):
        """The int8 twin's output q at grid p as the Tensor this layer returns: dequantized,
        marked with p; carrying y's gradient where y (the float forward) is given."""
        values = R.dequantize(q, np.float32(p.scale), int(p.zero_point))
        out = Tensor(values) if y is None else y + Tensor(values - y.data)
        out.qparams = p
        return out

    def wants_grad(self, *xs):
        """Whether an eval forward must carry gradients (to the inputs or the parameters)."""
        return is_grad_enabled() and (any(getattr(x, "requires_grad", False) for x in xs)
                                      or any(w.requires_grad for w in self.parameters()))

    def int8_twin(self, x, float_forward, sums, axis=1):
        """A weighted layer's forward (conv, transposed conv, linear, BN alone): in eval, its
        int8 twin's integers where int8_grids allows (the module docstring), else
        `float_forward(x)`. `sums(qx, zx, qw)` is the int32 accumulator of the integer input
        qx (zero point zx) and weight qw (the folded weight quantized per output channel, as
        `nn.quantized` stores it); output channels lie on `axis`."""
        grids = self.int8_grids(x)
        if grids is None:
            return float_forward(x)
        p_in, = grids
        s_in = np.float32(p_in.scale)
        w, b = self.folded()
        self.weight_observer(w)   # as fake_quant_weight and nn.quantized's set_weights do
        w_scale = np.asarray(self.weight_qparams().scale, np.float32)
        qw = R.quantize(w.data, w_scale, 0, np.int8, axis=0)
        acc = sums(R.quantize(x.data, s_in, p_in.zero_point, p_in.dtype), int(p_in.zero_point),
                   qw)
        p = self.act_qparams()
        s_out, zp = float(np.float32(p.scale)), int(p.zero_point)
        bias = np.zeros(qw.shape[0], np.float32) if b is None else b.data.astype(np.float32)
        bias_q, m, shift = R.requant_params(float(s_in), w_scale, bias, s_out)
        activation = getattr(self, "activation", None)
        q = R.requantize(acc, bias_q, m, shift, zp, activation is not None, p.dtype, axis)
        if activation == "relu6":
            q = np.minimum(q, R.relu6_max(s_out, zp, p.dtype)).astype(p.dtype)
        return self.int8_output(q, p, float_forward(x) if self.wants_grad(x) else None)

    def weight_qparams(self):
        return self.weight_fake_quant.qparams(self.weight_observer)

    def act_qparams(self):
        return self.act_fake_quant.qparams(self.act_observer)

    def attach_fused(self, parts):
        """Fused classes keep their extra parts (the BN) as children; the activation is a
        flag (`activation`), so its module, the last part, is checked and dropped."""
        want = {None: [], "relu": ["ReLU"], "relu6": ["ReLU6"]}[getattr(self, "activation",
                                                                       None)]
        got = [type(p).__name__ for p in parts]
        if got != want:
            raise TypeError(f"{type(self).__name__}: expected fused parts {want} after the "
                            f"first, got {got}")

    @classmethod
    def from_float(cls, module, qconfig):
        """A float module (or a float fused module) -> this QAT class, state copied."""
        parts = list(module.children()) if isinstance(module, Fused) else [module]
        qat = cls.__new__(cls)
        Module.__init__(qat)
        copy_state(qat, parts[0])
        qat.attach_fused(parts[1:])
        qat.attach_quantizers(qconfig)
        return qat
