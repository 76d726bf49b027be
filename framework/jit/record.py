"""The recording side of `jit.trace`: while the example runs, `Recorder` turns every call of
a leaf module into a `Step` on numbered slots (jit/graph.py has the rules), and `bind` /
`bind_module` make each step a function of the slot list, which `Graph` replays and
jit/serialize.py rebuilds from a file."""
import numpy as np

from ..quantization.qarray import QArray, wrap
from ..tensor import Tensor
from .views import owner, view_function, view_spec


class TraceError(RuntimeError):
    """The model does something the trace cannot record."""


class Const:
    """A module argument that is not a tensor, passed as traced."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return repr(self.value)


class Step:
    """One recorded call: module name and type, whether it runs natively (`graph_step`),
    input slots (a tuple for a list argument), output slot, output shape and dtype; `module`
    (with `kwargs`) or `view` (a views.py spec) is what it runs, `call` how."""
    __slots__ = ("name", "type", "native", "inputs", "output", "shape", "dtype", "call",
                 "module", "kwargs", "view")

    def __init__(self, name, kind, native, inputs, output, shape, dtype, module=None,
                 kwargs=None, view=None):
        self.name, self.type, self.native = name, kind, native
        self.inputs, self.output = inputs, output
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.module, self.kwargs, self.view = module, dict(kwargs or {}), view

    def __repr__(self):
        ins = ", ".join(str(i) for i in self.inputs)
        how = "native" if self.native else "module"
        return (f"{self.output:4d} = {self.name or '(model)'} [{self.type}, {how}]({ins})  "
                f"{tuple(self.shape)} {self.dtype}")


class Recorder:
    """One trace's bookkeeping: slots (the traced arrays and their int8 scales), the steps,
    and `call_through`, the Module.__call__ that records leaf calls."""

    def __init__(self, model, inputs):
        self.names = {id(m): name for name, m in model.named_modules()
                      if not m._modules or getattr(m, "graph_leaf", False)}
        self.arrays, self.qparams = [], []    # per slot: traced array, (scale, zp) or None
        self.slot_of, self.keep = {}, []      # id(Tensor) -> slot; the Tensors (unique ids)
        self.steps, self.depth = [], 0
        self.inputs = tuple(self.slot(x) for x in inputs)

    def call_through(self, original):
        def call(module, *args, **kwargs):
            if self.depth or id(module) not in self.names:
                return original(module, *args, **kwargs)
            self.depth += 1
            try:
                out = original(module, *args, **kwargs)
            finally:
                self.depth -= 1
            self.record(module, args, kwargs, out)
            return out
        return call

    def slot(self, tensor):
        key = id(tensor)
        if key not in self.slot_of:
            self.slot_of[key] = len(self.arrays)
            self.keep.append(tensor)
            data = tensor.data
            self.qparams.append((data.scale, data.zero_point) if isinstance(data, QArray)
                                else None)
            self.arrays.append(np.asarray(data))
        return self.slot_of[key]

    def known(self, value, name):
        """The slot of a traced tensor, or of a view of one (a step of its own)."""
        if id(value) in self.slot_of:
            return self.slot_of[id(value)]
        view = np.asarray(value.data)
        for source, array in enumerate(self.arrays):
            spec = view_spec(array, view) if owner(array) is owner(view) else None
            if spec is not None:
                slot = self.slot(value)
                step = Step(f"(view for {name})", "view", True, (source,), slot, view.shape,
                            view.dtype, view=spec)
                step.call = bind(view_function(spec), [source])
                self.steps.append(step)
                return slot
        raise TraceError(
            f"jit.trace: module '{name}' takes a tensor of shape {tuple(value.shape)} that no "
            "traced module made: the model computes it outside a module (an op in a forward; "
            "slices and reshapes of traced tensors are followed); make that op a module to "
            "trace this model")

    def template(self, args, name):
        """Per argument: a slot, a tuple of slots (a list of tensors), or a Const."""
        out = []
        for a in args:
            if isinstance(a, Tensor):
                out.append(self.known(a, name))
            elif isinstance(a, (list, tuple)) and a and all(isinstance(t, Tensor) for t in a):
                out.append(tuple(self.known(t, name) for t in a))
            elif isinstance(a, (list, tuple)) and any(isinstance(t, Tensor) for t in a):
                raise TraceError(f"jit.trace: module '{name}' takes a list mixing tensors "
                                 "and other values")
            else:
                out.append(Const(a))
        return out

    def record(self, module, args, kwargs, out):
        name = self.names[id(module)]
        if any(isinstance(v, Tensor) for v in kwargs.values()):
            raise TraceError(f"jit.trace: module '{name}' takes a tensor by keyword; pass "
                             "tensors by position to trace it")
        dequantizes = explicit_hooks(module)
        if dequantizes:
            args = self.dequantized(args, name)
        template = self.template(args, name)
        # hooked modules run as modules (a dequantizing pre-hook is a no-op on float inputs)
        hooked = module._forward_hooks or (module._forward_pre_hooks and not dequantizes)
        if getattr(module, "graph_alias", False) and not hooked and args and out is args[0]:
            return  # its result is its input: no step
        if not isinstance(out, Tensor):
            raise TraceError(f"jit.trace: module '{name}' ({type(module).__name__}) returns "
                             f"{type(out).__name__}; a traced module returns one Tensor")
        fn = None if hooked else self.native(module, args, kwargs, template, out, name)
        step = Step(name, type(module).__name__, fn is not None, tuple(template),
                    self.slot(out), out.shape, out.dtype, module, kwargs)
        step.call = bind(fn, template) if fn is not None else \
            bind_module(module, template, kwargs, self.qparams)
        self.steps.append(step)

    def dequantized(self, args, name):
        """args with each int8 tensor dequantized, as the pre-hook of a module kept float
        (`quantization.disable_quantize`) does, each by a DequantStub step of its own."""
        from ..nn.quantized import DequantStub
        out = []
        for k, a in enumerate(args):
            if not (isinstance(a, Tensor) and isinstance(a.data, QArray)):
                out.append(a)
                continue
            stub, template = DequantStub(), [self.known(a, name)]
            dq = stub(a)
            label = f"{name} (dequantize input {k})"
            fn = self.native(stub, (a,), {}, template, dq, label)
            step = Step(label, "DequantStub", True, tuple(template), self.slot(dq), dq.shape,
                        dq.dtype, stub)
            step.call = bind(fn, template)
            self.steps.append(step)
            out.append(dq)
        return tuple(out)

    def native(self, module, args, kwargs, template, out, name):
        """The module's `graph_step` function, checked against its result; None if none."""
        make = getattr(module, "graph_step", None)
        if make is None or kwargs or any(isinstance(t, Const) for t in template):
            return None
        fn = make(*args)
        if fn is None:
            return None
        got, want = fn(*[self.raw(t) for t in template]), np.asarray(out.data)
        if not (isinstance(got, np.ndarray) and got.dtype == want.dtype and
                got.shape == want.shape and got.strides == want.strides and
                np.array_equal(got, want)):
            raise TraceError(f"jit.trace: module '{name}' ({type(module).__name__}): its "
                             "graph_step does not give its forward's result (a bug in it)")
        return fn

    def raw(self, entry):
        return ([self.arrays[i] for i in entry] if isinstance(entry, tuple)
                else self.arrays[entry])

    def output_slots(self, out):
        if isinstance(out, Tensor):
            return self.known(out, "(the model's result)")
        if isinstance(out, (list, tuple)) and all(isinstance(t, Tensor) for t in out):
            return type(out)(self.known(t, "(the model's result)") for t in out)
        raise TraceError(f"jit.trace: the model returns {type(out).__name__}; a traced model "
                         "returns a Tensor or a list or tuple of Tensors")


def explicit_hooks(module):
    """Whether the module's hooks are all pre-hooks that the trace records as steps of their
    own (`graph_dequantize`: disable_quantize's dequantization of the inputs)."""
    pre = module._forward_pre_hooks.values()
    return bool(pre) and all(getattr(h, "graph_dequantize", False) for h in pre)


def slots_of(entry):
    if isinstance(entry, Const):
        return ()
    return entry if isinstance(entry, tuple) else (entry,)


def bind(fn, template):
    """A native step as a function of the slot list (arrays in, array out)."""
    if len(template) == 1 and isinstance(template[0], int):
        i = template[0]
        return lambda v: fn(v[i])
    if len(template) == 2 and all(isinstance(t, int) for t in template):
        i, j = template
        return lambda v: fn(v[i], v[j])
    return lambda v: fn(*[[v[k] for k in t] if isinstance(t, tuple) else v[t]
                          for t in template])


def bind_module(module, template, kwargs, qparams):
    """Any other module: called on Tensors made of the slots; its result's array kept."""
    def tensor(i, v):
        q = qparams[i]
        return Tensor._make(v[i], False, None) if q is None else wrap(v[i], *q)

    def arg(t, v):
        if isinstance(t, Const):
            return t.value
        if isinstance(t, tuple):
            return [tensor(k, v) for k in t]
        return tensor(t, v)

    def call(v):
        return np.asarray(module(*[arg(t, v) for t in template], **kwargs).data)
    return call
