"""QATModule: the mixin every `nn.qat` class adds to its float parent.

A QAT class subclasses the float class of the same name (`qat.Conv2d(nn.Conv2d)`), so it
keeps the float parameters, names and forward arguments; `from_float` copies a float
module's state generically (its attribute dict, parameters shared) and attaches
observers and fake quantizers built from a QConfig:

- ``weight_observer`` / ``weight_fake_quant``: the (folded) weight, per output channel;
- ``act_observer`` / ``act_fake_quant``: the output activation, per tensor.
"""
from collections import OrderedDict

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
