"""`trace` and `Graph`: a model's leaf-module calls, recorded once, replayed in order.

Recording: while the example runs, every call of a leaf module of the model (one without
children, or marked `graph_leaf = True` like the fused conv modules) is a step; its tensor
arguments must be the graph's inputs or earlier steps' results. A tensor made outside a
module (an op written in a `forward`) is refused with a `TraceError` naming the module it
reached, so nothing the model computes is left out; at the end the graph runs the example
and must give the model's result bit for bit.

Replaying: values are plain numpy arrays in slots, freed after their last use. A module with
a `graph_step(*inputs)` method (the int8 modules, the fused float convs, Flatten,
ChannelShuffle) runs as the function it returns on those arrays, checked at trace time
against the module's own result (values, dtype, strides); any other module, or one with
hooks, is called as usual on Tensors (int8 values wrapped with the scale and zero point they
had when traced); a module kept float by `quantization.disable_quantize` gets its inputs'
dequantization (its pre-hook) as DequantStub steps before it. `graph_alias = True` marks
modules whose eval-mode result is their input itself (Identity, Dropout, the float stubs):
they take no step. Slices and reshapes of traced tensors in a forward become view steps
(jit/views.py).

A graph is fixed to what the example met: input shapes (but the batch size with
`dynamic_batch`), dtypes and int8 scales (checked per call), the branches the forward took,
the model's weights and scales, the kernel choices. Trace again after changing the model.
Inference only: the model must be in eval mode. Tracing patches `Module.__call__` for the
one run: trace in one thread at a time.
"""
import numpy as np

from ..autograd import no_grad
from ..nn.module import Module
from ..quantization.qarray import QArray, wrap
from ..tensor import Tensor
from . import passes
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


def trace(model, *inputs, check=True, fuse=False, dynamic_batch=False):
    """Run `model(*inputs)` once (eval mode, no gradients) and return its `Graph`.
    `check`: run the graph on the inputs and require the model's result exactly.
    `fuse`: fold each float conv's batch norm and ReLU / ReLU6 into it (jit/passes.py; the
    result then equals the model's within float rounding, checked).
    `dynamic_batch`: the graph takes any size of the inputs' first axis; checked by running
    model and graph once more on the inputs grown by one item (bit for bit)."""
    if not isinstance(model, Module):
        raise TypeError(f"jit.trace: expected an nn.Module, got {type(model).__name__}")
    if model.training:
        raise ValueError("jit.trace: the model is in training mode; call model.eval() first "
                         "(a graph is for inference)")
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor):
            raise TypeError(f"jit.trace: input {i} is {type(x).__name__}, expected a Tensor")
    graph, out = _record(model, inputs, check)
    groups = passes.fusion_groups(graph) if fuse else []
    if groups:
        model = passes.fused_copy(model, groups)
        graph, fused_out = _record(model, inputs, check)
        if check and not passes.close_to(fused_out, out):
            raise TraceError("jit.trace: the fused graph's result is not the model's within "
                             "float rounding; trace with fuse=False")
    if dynamic_batch:
        _allow_any_batch(graph, model, inputs)
    return graph


def _allow_any_batch(graph, model, inputs):
    """Mark the graph batch-free once it gives the model's result on one more item."""
    if any(x.ndim == 0 or x.shape[0] == 0 for x in inputs):
        raise ValueError("jit.trace: dynamic_batch needs inputs with a non-empty leading batch "
                         f"axis, got shapes {[tuple(x.shape) for x in inputs]}")
    more = [_grown(x) for x in inputs]
    graph.dynamic_batch = True
    with no_grad():
        expected = model(*more)
    try:
        graph.check(more, expected)
    except (TraceError, ValueError) as error:
        graph.dynamic_batch = False
        raise TraceError(f"jit.trace: the graph does not hold for batch {more[0].shape[0]} "
                         "(a step that reads or reshapes the batch axis); trace with "
                         f"dynamic_batch=False ({error})") from None


def _grown(x):
    """x with its first item repeated at the end (batch + 1), as a Tensor of its kind."""
    data = x.data
    grown = np.concatenate([np.asarray(data), np.asarray(data)[:1]])
    return wrap(grown, data.scale, data.zero_point) if isinstance(data, QArray) else \
        Tensor(grown)


def _record(model, inputs, check):
    """(the Graph of model(*inputs), the model's result)."""
    recorder = _Recorder(model, inputs)
    original = Module.__call__
    Module.__call__ = recorder.call_through(original)
    try:
        with no_grad():
            out = model(*inputs)
    finally:
        Module.__call__ = original
    outputs = recorder.output_slots(out)   # may add view steps
    slots = [(a.shape, a.dtype, a.strides, q) for a, q in zip(recorder.arrays, recorder.qparams)]
    graph = Graph(recorder.steps, recorder.inputs, outputs, slots)
    if check:
        graph.check(inputs, out)
    return graph, out


class Graph:
    """A traced model: `graph(*inputs)` gives what `model(*inputs)` gave for inputs of the
    traced shapes and dtypes. `steps` lists the recorded calls (`Step`), `print(graph)`
    shows them."""

    def __init__(self, steps, inputs, outputs, slots, dynamic_batch=False):
        """steps: `Step`s with their `call`; inputs: the input slots; outputs: a slot or a
        list/tuple of slots; slots: per slot (shape, dtype, strides, (scale, zp) or None) as
        traced; dynamic_batch: whether inputs may have another first-axis size."""
        self.steps, self.inputs, self.outputs, self.slots = steps, inputs, outputs, slots
        self.dynamic_batch = dynamic_batch
        self._qparams = [q for *_, q in slots]
        # per input: (shape, dtype, (scale, zero point) or None), as a call must give them
        self.input_specs = [(slots[i][0], slots[i][1], slots[i][3]) for i in inputs]
        self._plan = [(s.call, s.output, frees) for s, frees in zip(steps, self._frees())]

    def _frees(self):
        """Per step: the slots it reads for the last time (never the graph's results)."""
        outs = set(self.outputs if isinstance(self.outputs, (list, tuple)) else [self.outputs])
        last = {}
        for k, step in enumerate(self.steps):
            for entry in step.inputs:
                for i in _slots_of(entry):
                    last[i] = k
        frees = [[] for _ in self.steps]
        for i, k in last.items():
            if i not in outs:
                frees[k].append(i)
        return [tuple(f) for f in frees]

    def __call__(self, *inputs):
        if len(inputs) != len(self.inputs):
            raise TypeError(f"Graph: traced with {len(self.inputs)} inputs, got {len(inputs)}")
        v = [None] * len(self.slots)
        for k, (x, slot, spec) in enumerate(zip(inputs, self.inputs, self.input_specs)):
            data = x.data if isinstance(x, Tensor) else np.asarray(x)   # a Tensor or array
            v[slot] = _checked(k, data, *spec, self.dynamic_batch)
        with no_grad():
            for call, out, frees in self._plan:
                v[out] = call(v)
                for i in frees:
                    v[i] = None
        if isinstance(self.outputs, int):
            return self._tensor(v, self.outputs)
        return type(self.outputs)(self._tensor(v, i) for i in self.outputs)

    def profile(self, *inputs, repeats=10):
        """Per-step median time, whole-run median and peak memory (jit/profile.py)."""
        from .profile import profile
        return profile(self, inputs, repeats)

    def save(self, path):
        """Write the graph (steps, modules with their weights) to one file, which
        `tianyuan.runtime.load` runs without the model's code (jit/serialize.py)."""
        from .serialize import save
        save(self, path)

    def _tensor(self, v, i):
        q = self._qparams[i]
        return Tensor(v[i]) if q is None else wrap(v[i], *q)

    def check(self, inputs, expected):
        """Raise TraceError unless the graph gives `expected` (the model's result)."""
        got = self(*inputs)
        pairs = zip(got, expected) if isinstance(got, (list, tuple)) else [(got, expected)]
        for k, (g, e) in enumerate(pairs):
            same = (g.data.dtype == e.data.dtype and g.shape == e.shape and
                    np.array_equal(g.data, e.data, equal_nan=g.data.dtype.kind == "f") and
                    getattr(g.data, "scale", None) == getattr(e.data, "scale", None) and
                    getattr(g.data, "zero_point", None) == getattr(e.data, "zero_point", None))
            if not same:
                raise TraceError(
                    f"jit.trace: the graph's result {k} differs from the model's: its forward "
                    "does something the trace cannot see (an in-place op between modules, a "
                    "branch on values, randomness)")

    def __repr__(self):
        native = sum(s.native for s in self.steps)
        ins = ", ".join(f"{d} {tuple(s)}" for s, d, _ in self.input_specs)
        lines = [f"Graph(inputs {ins}{', any batch' if self.dynamic_batch else ''}; "
                 f"{len(self.steps)} steps, {native} native; result slot {self.outputs}"]
        lines += [f"  {s!r}" for s in self.steps]
        return "\n".join(lines) + ")"


class _Recorder:
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


def _checked(k, data, shape, dtype, qparams, any_batch):
    """Input k's array, if it has the traced shape (any first axis where any_batch), dtype
    and quantization."""
    same = data.shape[1:] == shape[1:] if any_batch and data.ndim else data.shape == shape
    if not same or data.dtype != dtype:
        traced = f"(N, {', '.join(map(str, shape[1:]))})" if any_batch else str(shape)
        raise ValueError(f"Graph: input {k} is {data.dtype} {data.shape}; the graph was "
                         f"traced for {dtype} {traced} (trace again for this one)")
    got = (data.scale, data.zero_point) if isinstance(data, QArray) else None
    if got != qparams:
        raise ValueError(f"Graph: input {k} has (scale, zero point) {got}; the graph was "
                         f"traced for {qparams}")
    return np.asarray(data)


def _slots_of(entry):
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
