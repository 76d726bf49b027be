"""`trace` and `Graph`: a model's leaf-module calls, recorded once, replayed in order.

Recording: while the example runs, every call of a leaf module of the model (one without
children, or marked `graph_leaf = True` like the fused conv modules) is a step; its tensor
arguments must be the graph's inputs or earlier steps' results. A tensor made outside a
module (an op written in a `forward`) is refused with a `TraceError` naming the module it
reached, so nothing the model computes is left out; at the end the graph runs the example
and must give the model's result bit for bit.

Replaying: values are plain numpy arrays in slots, freed after their last use. Tracing plans
their memory (jit/memory.py: one arena, offsets by lifetime, saved in the graph file); the
steps it puts in place (float ReLU, ReLU6, Add, AddReLU into a dead input) compute into their
input's array, the others still return new arrays from their kernels. A module with
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
from . import memory, passes
from .record import Recorder, TraceError, bind, slots_of


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
    recorder = Recorder(model, inputs)
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
    graph.plan_memory(inputs)
    if check:
        graph.check(inputs, out)   # in place where the plan says: the model's bits
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
        self.memory = None   # the memory plan (jit/memory.py), set by plan_memory
        self._qparams = [q for *_, q in slots]
        # per input: (shape, dtype, (scale, zero point) or None), as a call must give them
        self.input_specs = [(slots[i][0], slots[i][1], slots[i][3]) for i in inputs]
        self._plan = self._unplanned()   # per step (call, output slot, slots freed after)

    def _frees(self):
        """Per step: the slots it reads for the last time (never the graph's results)."""
        outs = set(self.outputs if isinstance(self.outputs, (list, tuple)) else [self.outputs])
        last = {}
        for k, step in enumerate(self.steps):
            for entry in step.inputs:
                for i in slots_of(entry):
                    last[i] = k
        frees = [[] for _ in self.steps]
        for i, k in last.items():
            if i not in outs:
                frees[k].append(i)
        return [tuple(f) for f in frees]

    def plan_memory(self, inputs):
        """Plan the activations (jit/memory.py) from one run on `inputs`, which finds the
        steps whose result is a view of an input, and run in place where the plan says."""
        with no_grad():
            roots, _ = memory.alias_roots(self, self._values(inputs))
        return self.use_memory_plan(memory.plan(self, roots))

    def use_memory_plan(self, plan):
        """Run with `plan` (a memory.Plan of this graph; None: unplanned): its in-place steps
        compute into their input. Returns the plan."""
        self._plan = self._unplanned()
        if plan is not None:
            into = dict(plan.inplace)
            self._plan = [(self._inplace(step, into[k]) if k in into else call, out, frees)
                          for k, (step, (call, out, frees)) in
                          enumerate(zip(self.steps, self._plan))]
        self.memory = plan
        return plan

    def _unplanned(self):
        return [(s.call, s.output, frees) for s, frees in zip(self.steps, self._frees())]

    @staticmethod
    def _inplace(step, slot):
        """Step's call computing into its input `slot` (its first argument)."""
        if step.inputs[0] != slot:
            raise memory.PlanError(f"step '{step.name}' computes in place into its first "
                                   f"input, slot {step.inputs[0]}, not {slot}")
        return bind(memory.inplace_kernel(step), list(step.inputs))

    def _values(self, inputs):
        """The slot list with the inputs checked and set."""
        if len(inputs) != len(self.inputs):
            raise TypeError(f"Graph: traced with {len(self.inputs)} inputs, got {len(inputs)}")
        v = [None] * len(self.slots)
        for k, (x, slot, spec) in enumerate(zip(inputs, self.inputs, self.input_specs)):
            data = x.data if isinstance(x, Tensor) else np.asarray(x)   # a Tensor or array
            v[slot] = _checked(k, data, *spec, self.dynamic_batch)
        return v

    def __call__(self, *inputs):
        v = self._values(inputs)
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
