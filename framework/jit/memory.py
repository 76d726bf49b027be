"""A traced graph's static memory plan: every activation an offset in one arena, known before
the graph runs.

Buffers. A step's result owns a buffer unless it shares memory with one of the step's inputs
(a view step, a reshaping Flatten: found by running the graph, `alias_roots`), in which case
it lives in that input's buffer. The graph's inputs are the caller's and take none.
Lifetimes come from the step order: a buffer is live from the step that writes it to the last
step that reads it or any alias of it; a graph result lives to the end.

In place. A step whose implementation writes each element of its result from the same element
of an input, and only after reading it (`INPLACE`: float ReLU, ReLU6, Add, AddReLU), takes
that input's buffer when the step is the buffer's last read and the two have one shape, dtype
and layout. At run time the step then writes into its input's array (jit/graph.py).

Offsets: greedy by size, best fit (TFLite's "greedy by size" arena planner; MegEngine's static
memory planner): buffers from the largest down, each at the lowest offset of the smallest gap
that fits it among the buffers already placed whose lifetimes overlap its own, else above them
all. Offsets and sizes are multiples of `ALIGNMENT`.

A plan read from a file is checked against lifetimes computed anew from the file's steps
(`check`): every buffer once, its true size, inside the arena, no two live at one step
overlapping, in-place steps only where the op and the lifetimes allow. Nothing of a plan is
trusted for memory safety before that.
"""
import numpy as np

from .record import slots_of

ALIGNMENT = 64
MAX_ARENA = 1 << 40   # bytes: a plan claiming more is a damaged or crafted file


class PlanError(ValueError):
    """A memory plan that does not fit its graph."""


# ------------------------------------------------------------------ in-place steps

def _clamp_into(lo, hi):
    from .. import _C

    def run(x):
        return _C.clamp(x, lo, hi, out=x)
    return run


def _add_into(lo, hi):
    from .. import _C

    def run(a, b):
        return _C.add_clamp(a, b, lo, hi, out=a)
    return run


def _plain_add(a, b):
    return np.add(a, b, out=a)


def inplace_kernel(step):
    """The function that computes `step` into its first input, or None where the step cannot
    (not one of the ops below, hooks, keyword arguments, not float, a broadcast)."""
    from ..nn import activation, quant_points
    module = step.module
    if module is None or step.native or step.kwargs or step.view is not None:
        return None
    if module._forward_hooks or module._forward_pre_hooks:
        return None
    kind = type(module)
    if kind is activation.ReLU and step.dtype == np.float32:
        return _clamp_into(0.0, np.inf)
    if kind is activation.ReLU6 and step.dtype == np.float32:
        return _clamp_into(0.0, 6.0)
    if kind is quant_points.AddReLU and step.dtype == np.float32:
        return _add_into(0.0, np.inf)
    if kind is quant_points.Add and step.dtype.kind == "f":
        return _plain_add
    return None


def _inplace_inputs(step, slots):
    """The input slots `step` could write its result into: same shape, dtype and strides,
    C-contiguous (the native kernels' `out`)."""
    if inplace_kernel(step) is None or not all(isinstance(e, int) for e in step.inputs):
        return []
    want = slots[step.output][:3]
    shape, dtype, strides = want
    if any(slots[i][:3] != want for i in step.inputs) or \
            tuple(strides) != np.empty(shape, dtype).strides:
        return []
    return list(step.inputs)[:1]   # the kernels write into their first argument


# ------------------------------------------------------------------ buffers and lifetimes

def nbytes(slot):
    """Bytes a slot's array spans, rounded up to ALIGNMENT (0 for an empty one)."""
    shape, dtype, strides = slot[0], np.dtype(slot[1]), slot[2]
    if any(n == 0 for n in shape):
        return 0
    span = sum((n - 1) * abs(s) for n, s in zip(shape, strides)) + dtype.itemsize
    return -(-int(span) // ALIGNMENT) * ALIGNMENT


def alias_roots(graph, v, run=None):
    """(per slot the slot whose buffer it lives in: itself for a buffer of its own; per slot
    (shape, dtype, strides) as it ran), from running the graph's steps as traced (none in
    place) on the values `v` (the inputs set): each result is compared with the step's
    inputs while they are alive. run(step, call, v): how to call a step (default call(v))."""
    roots, seen = list(range(len(graph.slots))), [s[:3] for s in graph.slots]
    for i in graph.inputs:
        seen[i] = (v[i].shape, v[i].dtype, v[i].strides)
    for step, frees in zip(graph.steps, graph._frees()):
        call, out = step.call, step.output
        v[out] = call(v) if run is None else run(step, call, v)
        base, seen[out] = _owner(v[out]), (v[out].shape, v[out].dtype, v[out].strides)
        for i in (i for e in step.inputs for i in slots_of(e)):
            if v[i] is not None and _owner(v[i]) is base:
                roots[out] = roots[i]
                break
        for i in frees:
            v[i] = None
    return roots, seen


def _owner(array):
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _results(graph):
    outs = graph.outputs
    return set(outs) if isinstance(outs, (list, tuple)) else {outs}


def lifetimes(graph, roots, inplace=()):
    """({buffer slot: [first step, last step]}, slot -> its buffer slot) for the buffers a
    plan places: results of steps that own their memory, an in-place step's result in its
    input's buffer (the pairs (step, input slot) of `inplace`)."""
    into = {graph.steps[k].output: i for k, i in inplace}

    def buffer(slot):
        slot = roots[slot]
        while slot in into:
            slot = roots[into[slot]]
        return slot

    inputs, home = set(graph.inputs), {}
    for k, step in enumerate(graph.steps):
        for i in (i for e in step.inputs for i in slots_of(e)):
            if buffer(i) in home:
                home[buffer(i)][1] = k
        if buffer(step.output) not in inputs:
            home.setdefault(buffer(step.output), [k, k])
    for slot in _results(graph):
        if buffer(slot) in home:
            home[buffer(slot)][1] = len(graph.steps)
    return home, buffer


def _inplace_pairs(graph, roots, slots):
    """Every (step, input slot) that may run in place: an in-place op whose input is a buffer
    of its own (not a graph input, nor an alias) read for the last time by the step. Each
    input has one last reader and each step one pair, so all of them can be taken together."""
    home, _ = lifetimes(graph, roots)
    return [(k, i) for k, step in enumerate(graph.steps) if roots[step.output] == step.output
            for i in _inplace_inputs(step, slots)
            if roots[i] == i and i in home and home[i][1] == k]


# ------------------------------------------------------------------ the plan

class Plan:
    """offsets: {buffer slot: byte offset}; sizes: {buffer slot: bytes}; inplace: the
    (step, input slot) pairs computed in place; arena: bytes of the one arena; live: per
    buffer [first, last step]; home_of: slot -> the buffer slot it lives in."""

    def __init__(self, offsets, sizes, inplace, arena, live, home_of):
        self.offsets, self.sizes, self.inplace = offsets, sizes, list(inplace)
        self.arena, self.live, self._home_of = arena, live, home_of

    def buffer_of(self, slot):
        """The buffer slot that `slot` lives in, or None (a graph input, unplanned)."""
        home = self._home_of(slot)
        return home if home in self.offsets else None

    @property
    def total(self):
        """Bytes of all the buffers together: what the graph would hold if nothing were
        freed or shared."""
        return sum(self.sizes.values())

    def live_bytes(self):
        """Per step, the bytes of the buffers live at it."""
        per_step = [0] * (max((b for _, b in self.live.values()), default=-1) + 1)
        for slot, (a, b) in self.live.items():
            for k in range(a, b + 1):
                per_step[k] += self.sizes[slot]
        return per_step

    def to_json(self):
        return {"alignment": ALIGNMENT, "arena": self.arena,
                "buffers": [[s, self.offsets[s], self.sizes[s]] for s in sorted(self.offsets)],
                "inplace": [list(p) for p in self.inplace]}

    def __repr__(self):
        return (f"Plan(arena {self.arena:,} bytes for {len(self.offsets)} buffers of "
                f"{self.total:,}; {len(self.inplace)} steps in place)")


def plan(graph, roots, slots=None):
    """The memory plan of `graph` (its slots' buffers from `alias_roots`), for the slots'
    traced shapes or for `slots` (per slot (shape, dtype, strides), as `alias_roots` saw them
    run: another batch size)."""
    slots = graph.slots if slots is None else slots
    pairs = _inplace_pairs(graph, roots, slots)
    live, home_of = lifetimes(graph, roots, pairs)
    sizes = {s: nbytes(slots[s]) for s in live}
    offsets = greedy_by_size(live, sizes)
    arena = max((offsets[s] + sizes[s] for s in offsets), default=0)
    return Plan(offsets, sizes, pairs, arena, live, home_of)


def greedy_by_size(live, sizes):
    """{buffer: offset}: largest first, each in the smallest gap that fits among the placed
    buffers whose lifetimes overlap its own (ties: the lower offset), else on top."""
    order = sorted(live, key=lambda s: (-sizes[s], live[s][0], s))
    placed, offsets = [], {}
    for s in order:
        first, last = live[s]
        busy = sorted((offsets[t], offsets[t] + sizes[t]) for t in placed
                      if live[t][0] <= last and first <= live[t][1] and sizes[t])
        best, best_gap, top = None, None, 0
        for begin, end in busy:
            gap = begin - top
            if gap >= sizes[s] and (best_gap is None or gap < best_gap):
                best, best_gap = top, gap
            top = max(top, end)
        offsets[s] = top if best is None else best
        placed.append(s)
    return offsets


# ------------------------------------------------------------------ a plan from a file

def _ints(value, what, count=None):
    if not (isinstance(value, list) and all(type(v) is int for v in value) and
            (count is None or len(value) == count)):
        raise PlanError(f"{what} must be a list of {count or 'some'} integers, got "
                        f"{str(value)[:80]}")
    return value


def check(record, graph, roots):
    """The Plan that a file's `record` describes, after checking it against the graph's
    lifetimes; PlanError saying what does not fit."""
    if not isinstance(record, dict) or record.get("alignment") != ALIGNMENT:
        raise PlanError(f"the memory plan must be a record with alignment {ALIGNMENT}")
    arena = record.get("arena")
    if type(arena) is not int or not 0 <= arena <= MAX_ARENA:
        raise PlanError(f"the arena size {str(arena)[:40]} is not an integer in "
                        f"[0, {MAX_ARENA:,}]")
    pairs = [tuple(_ints(p, "an in-place entry", 2)) for p in _list(record, "inplace")]
    allowed = set(_inplace_pairs(graph, roots, graph.slots))
    for k, i in pairs:
        if (k, i) not in allowed:
            raise PlanError(f"step {k} may not compute into slot {i} in place (not an "
                            "in-place op, or the slot is read later or laid out otherwise)")
    if len({k for k, _ in pairs}) != len(pairs) or len({i for _, i in pairs}) != len(pairs):
        raise PlanError("the plan computes a step or a buffer in place twice")
    live, home_of = lifetimes(graph, roots, pairs)
    offsets, sizes = {}, {}
    for entry in _list(record, "buffers"):
        slot, offset, size = _ints(entry, "a buffer entry", 3)
        if slot not in live or slot in offsets:
            raise PlanError(f"the plan places slot {slot}, which is no buffer of the graph "
                            "or placed twice")
        want = nbytes(graph.slots[slot])
        if size != want:
            raise PlanError(f"the plan gives slot {slot} {size} bytes; it holds {want}")
        if offset < 0 or offset % ALIGNMENT or offset + size > arena:
            raise PlanError(f"slot {slot} at offset {offset} (+{size} bytes) is not an "
                            f"aligned place inside the {arena}-byte arena")
        offsets[slot], sizes[slot] = offset, size
    missing = sorted(set(live) - set(offsets))
    if missing:
        raise PlanError(f"the plan places no buffer for slots {missing[:8]}")
    _disjoint(live, offsets, sizes)
    return Plan(offsets, sizes, pairs, arena, live, home_of)


def _list(record, key):
    value = record.get(key)
    if not isinstance(value, list):
        raise PlanError(f"the memory plan's {key!r} must be a list")
    return value


def _disjoint(live, offsets, sizes):
    """PlanError unless the buffers live at each step have disjoint byte ranges."""
    starts = {}
    for slot, (first, _) in live.items():
        starts.setdefault(first, []).append(slot)
    active = []
    for k in sorted({a for a, _ in live.values()}):
        active = [s for s in active if live[s][1] >= k] + starts[k]
        ranges = sorted((offsets[s], offsets[s] + sizes[s], s) for s in active if sizes[s])
        for (_, end, a), (begin, _, b) in zip(ranges, ranges[1:]):
            if begin < end:
                raise PlanError(f"slots {a} and {b} are live together at step {k} but "
                                "overlap in the arena")
