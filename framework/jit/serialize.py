"""A traced graph as one file: `graph.save(path)`, `tianyuan.runtime.load(path)`.

The file is a tianyuan safetensors file (`tianyuan.save`: arrays in the tensor table, the
structure as JSON, written atomically, checked by CRC on load, nothing pickled): the input
and output slots, each slot's shape, dtype, strides and int8 scale / zero point, the steps
(a module by index with its arguments, or a view), and the modules: class name, their
plain attributes (numbers, strings, tuples), parameters and buffers. Loading needs no model
code: the modules are `tianyuan.nn` classes (a saved graph holds no other), rebuilt from
their state as `load_state_dict` leaves them (int8 weights packed again), and each native
step asks its module for its `graph_step` on stand-in inputs of the traced layout.
"""
import importlib

import numpy as np

from ..io import load as load_file
from ..io import save as save_file
from ..io.serialization import SerializationError, one_line
from ..nn.module import Module
from ..nn.parameter import Parameter
from ..quantization.qarray import wrap
from ..tensor import Tensor
from . import memory
from .graph import Graph
from .record import Const, Step, bind, bind_module, explicit_hooks
from .views import view_function

FORMAT = "tianyuan.graph"
VERSION = 1
ALLOWED = "tianyuan.nn."   # the packages whose modules a graph file may name
SLOT_DTYPES = ("float32", "float64", "float16", "uint8", "int8", "int32", "int64", "bool")
QUANT_RANGE = {"uint8": (0, 255), "int8": (-128, 127)}
MAX_SLOT_BYTES = 1 << 34    # 16 GiB: a slot claiming more is a damaged or crafted file


def save(graph, path):
    """Write `graph` (a `jit.Graph`) to `path` as one file."""
    modules, index, steps = [], {}, []
    for step in graph.steps:
        entry = {"name": step.name, "type": step.type, "native": step.native,
                 "inputs": [_entry(e, step.name) for e in step.inputs], "output": step.output}
        if step.view is not None:
            entry["view"] = list(step.view)
        else:
            if id(step.module) not in index:
                _refuse_hooks(step.module, step.name)
                index[id(step.module)] = len(modules)
                modules.append(_module_state(step.module, step.name))
            if not _plain(list(step.kwargs.values())):
                raise SerializationError(f"Graph.save: step '{step.name}' takes keyword "
                                         "arguments a graph file cannot hold")
            entry["module"], entry["kwargs"] = index[id(step.module)], step.kwargs
        steps.append(entry)
    slots = [{"shape": tuple(shape), "dtype": str(dtype), "strides": tuple(strides),
              "qparams": None if q is None else (float(q[0]), int(q[1]))}
             for shape, dtype, strides, q in graph.slots]
    outputs = graph.outputs if isinstance(graph.outputs, int) else {
        "kind": type(graph.outputs).__name__, "slots": list(graph.outputs)}
    save_file({"format": FORMAT, "version": VERSION, "inputs": list(graph.inputs),
               "outputs": outputs, "slots": slots, "steps": steps, "modules": modules,
               "dynamic_batch": graph.dynamic_batch,
               "memory": None if graph.memory is None else graph.memory.to_json()}, path)


def load(path):
    """The `jit.Graph` saved at `path`, ready to run (no model code needed)."""
    data = load_file(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SerializationError(f"runtime.load: {path} is not a saved graph (no "
                                 f"'format': '{FORMAT}'; a weights file loads with "
                                 "tianyuan.load)")
    if data.get("version") != VERSION:
        raise SerializationError(f"runtime.load: {path} has graph format version "
                                 f"{data.get('version')}; this tianyuan reads {VERSION}")
    try:
        graph = _graph(data, path)
    except SerializationError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError,
            RecursionError, MemoryError) as error:
        raise SerializationError(f"runtime.load: {path} is not a well-formed graph file "
                                 f"({type(error).__name__}: {one_line(error)})") from error
    _trial(graph, path, data.get("memory"))
    return graph


def _graph(data, path):
    slots = [_slot(s, k, path) for k, s in enumerate(data["slots"])]
    modules = [_module(state, path) for state in data["modules"]]
    steps = [_step(entry, modules, slots) for entry in data["steps"]]
    for step in steps:
        _check_step(step, slots, path)
    outputs = data["outputs"]
    if isinstance(outputs, dict):
        if outputs.get("kind") not in ("tuple", "list"):
            raise SerializationError(f"runtime.load: {path}: the outputs are a "
                                     f"{outputs.get('kind')!r}; a graph returns a slot, a "
                                     "tuple or a list")
        outputs = (tuple if outputs["kind"] == "tuple" else list)(outputs["slots"])
    used = [i for step in steps for e in step.inputs if not isinstance(e, Const)
            for i in (e if isinstance(e, tuple) else (e,))]
    used += [s.output for s in steps] + list(data["inputs"])
    used += [outputs] if isinstance(outputs, int) else list(outputs)
    if any(not isinstance(i, int) or not 0 <= i < len(slots) for i in used):
        raise SerializationError(f"runtime.load: {path} refers to slots outside its "
                                 f"{len(slots)}")
    return Graph(steps, tuple(data["inputs"]), outputs, slots, bool(data["dynamic_batch"]))


# ------------------------------------------------------------------ save

def _entry(entry, name):
    if isinstance(entry, Const):
        if not _plain(entry.value):
            raise SerializationError(f"Graph.save: step '{name}' takes a "
                                     f"{type(entry.value).__name__} argument, which a graph "
                                     "file cannot hold")
        return {"const": entry.value}
    if isinstance(entry, tuple):
        return {"slots": list(entry)}
    return {"slot": entry}


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (tuple, list)) and all(_plain(v) for v in value)


def _refuse_hooks(module, name):
    """A file holds no hooks: a module (or part of one) with hooks would run without them
    after loading. disable_quantize's pre-hook is in the graph as steps of its own."""
    for part in module.modules():
        if part._forward_hooks or (part._forward_pre_hooks and not explicit_hooks(part)):
            raise SerializationError(
                f"Graph.save: step '{name}' ({type(module).__name__}) has forward hooks, "
                "which a graph file cannot hold (the loaded graph would run without them); "
                "remove them and trace again")


def _module_state(module, name):
    """{class, config, children, parameters, buffers, non_persistent} of a tianyuan.nn
    module (its children the same, by name)."""
    cls = type(module)
    qualified = f"{cls.__module__}.{cls.__qualname__}"
    if not cls.__module__.startswith(ALLOWED):
        raise SerializationError(
            f"Graph.save: step '{name}' runs {qualified}; a graph file holds tianyuan.nn "
            "modules only (it loads without the model's code)")
    derived = set(getattr(cls, "graph_derived", ()))   # rebuilt by _state_loaded
    config = {}
    for key, value in module.__dict__.items():
        if key.startswith("_") or key == "training" or key in derived:
            continue
        if not _plain(value):
            raise SerializationError(f"Graph.save: step '{name}' ({qualified}): attribute "
                                     f"'{key}' is a {type(value).__name__}, which a graph "
                                     "file cannot hold")
        config[key] = value
    children = {k: _module_state(m, f"{name}.{k}") for k, m in module._modules.items()}
    return {"class": qualified, "config": config, "children": children,
            "parameters": {k: None if p is None else p.data
                           for k, p in module._parameters.items()},
            "buffers": {k: None if b is None else b.data for k, b in module._buffers.items()},
            "non_persistent": sorted(module._non_persistent)}


# ------------------------------------------------------------------ load

def _slot(entry, k, path):
    """(shape, dtype, strides, qparams) of slot k, each checked before anything is sized by
    it: a huge shape had allocated (a MemoryError for 1 TiB), a uint8 zero point of 256 had
    shifted the output."""
    shape, strides, dtype = entry["shape"], entry["strides"], str(entry["dtype"])
    where = f"runtime.load: {path}: slot {k}"
    if dtype not in SLOT_DTYPES:
        raise SerializationError(f"{where} has dtype {dtype!r}; a graph slot is one of "
                                 f"{', '.join(SLOT_DTYPES)}")
    if not (isinstance(shape, (list, tuple)) and isinstance(strides, (list, tuple)) and
            len(shape) == len(strides) <= 8 and
            all(type(n) is int and n >= 0 for n in shape) and
            all(type(t) is int for t in strides)):
        raise SerializationError(f"{where}: shape {shape!r} and strides {strides!r} must be "
                                 "equal-length lists of integers (sizes >= 0)")
    itemsize = np.dtype(dtype).itemsize
    span = sum((n - 1) * abs(t) for n, t in zip(shape, strides) if n > 0) + itemsize
    size = int(np.prod([float(n) for n in shape])) * itemsize
    if max(span, size) > MAX_SLOT_BYTES:
        raise SerializationError(f"{where} claims {max(span, size):,} bytes (shape "
                                 f"{tuple(shape)}); a graph slot holds at most "
                                 f"{MAX_SLOT_BYTES:,}")
    qparams = entry["qparams"]
    if qparams is not None:
        scale, zero_point = float(qparams[0]), qparams[1]
        low, high = QUANT_RANGE.get(dtype, (None, None))
        if low is None or type(zero_point) is not int or not low <= zero_point <= high or \
                not (np.isfinite(scale) and scale > 0):
            raise SerializationError(f"{where}: a quantized {dtype} slot with scale {scale} "
                                     f"and zero point {zero_point!r}; it needs a uint8/int8 "
                                     "slot, a finite scale > 0 and a zero point in the "
                                     "dtype's range")
        qparams = (np.float32(scale), zero_point)
    return tuple(shape), np.dtype(dtype), tuple(strides), qparams


def _check_step(step, slots, path):
    """An int8 module's output dtype and zero point must be what its output slot holds (an
    edited dtype_name had run with the other dtype's meaning)."""
    module = step.module
    if module is None or "scale" not in getattr(module, "_buffers", {}):
        return
    name = getattr(module, "dtype_name", None)
    low, high = QUANT_RANGE.get(str(name), (None, None))
    zero_point = np.asarray(module._buffers["zero_point"].data)
    where = f"runtime.load: {path}: step '{step.name}'"
    if low is None or zero_point.min() < low or zero_point.max() > high:
        raise SerializationError(f"{where} has an int8 output of dtype {name!r} with zero "
                                 f"point {zero_point.tolist()}")
    if step.native and np.dtype(name) != slots[step.output][1]:
        raise SerializationError(f"{where} writes {name}, but its output slot is "
                                 f"{slots[step.output][1]}")


def _trial(graph, path, record):
    """Run the graph once on inputs of zeros of the traced shapes: a step a damaged file
    cannot run (a missing attribute, a value of the wrong type, a geometry its kernel
    refuses) fails here, naming the file and the step, instead of at the user's call. That
    run finds the buffers the memory plan must place; the file's plan (`record`) is checked
    against them (a file without one is planned anew) and the graph runs with it."""
    v = [None] * len(graph.slots)
    for slot in graph.inputs:
        v[slot] = np.asarray(_stand_in(graph.slots[slot]).data).copy()

    def run(step, call, v):
        try:
            out = call(v)
            if not isinstance(out, np.ndarray):
                raise TypeError(f"it gives a {type(out).__name__}, not an array")
        except Exception as error:
            raise SerializationError(
                f"runtime.load: {path}: step '{step.name}' ({step.type}) cannot run: "
                f"{type(error).__name__}: {one_line(error)} (a damaged or edited "
                "graph file?)") from None
        return out

    from ..autograd import no_grad
    with no_grad():
        roots, _ = memory.alias_roots(graph, v, run)
    try:
        plan = memory.plan(graph, roots) if record is None else \
            memory.check(record, graph, roots)
    except memory.PlanError as error:
        raise SerializationError(f"runtime.load: {path}: its memory plan does not fit the "
                                 f"graph: {one_line(error)} (a damaged or edited graph "
                                 "file?)") from None
    graph.use_memory_plan(plan)


def _class(qualified, path):
    modname, _, name = qualified.rpartition(".")
    if not modname.startswith(ALLOWED):
        raise SerializationError(f"runtime.load: {path} names {qualified}; a graph file may "
                                 "name tianyuan.nn modules only")
    try:
        cls = getattr(importlib.import_module(modname), name, None)
    except ImportError:   # a module path this tianyuan lacks (or a damaged name)
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, Module)):
        raise SerializationError(f"runtime.load: {path} names {qualified}, which this "
                                 "tianyuan has no module class for")
    return cls


def _module(state, path):
    cls = _class(state["class"], path)
    module = cls.__new__(cls)
    Module.__init__(module)
    for key, child in state["children"].items():   # a fused module's parts
        module.add_module(key, _module(child, path))
    for key, value in state["config"].items():
        if not key.isidentifier() or key.startswith("_") or key == "training":
            raise SerializationError(f"runtime.load: {path} sets {state['class']}.{key}, "
                                     "which a graph file may not")
        setattr(module, key, value)
    for key, array in state["parameters"].items():
        module.register_parameter(key, None if array is None else
                                  Parameter(array, requires_grad=False))
    for key, array in state["buffers"].items():
        module.register_buffer(key, None if array is None else Tensor(array),
                               key not in state["non_persistent"])
    module._state_loaded()   # int8 weights packed, caches fresh
    return module.eval()


def _stand_in(slot):
    """A Tensor of the slot's shape, dtype, strides and quantization (zeros)."""
    shape, dtype, strides, qparams = slot
    span = sum((n - 1) * s for n, s in zip(shape, strides) if n > 0) + dtype.itemsize
    flat = np.zeros(max(span, dtype.itemsize) // dtype.itemsize + 1, dtype)
    array = np.lib.stride_tricks.as_strided(flat, shape, strides)
    return Tensor._make(array, False, None) if qparams is None else wrap(array, *qparams)


def _step(entry, modules, slots):
    template = tuple(Const(e["const"]) if "const" in e else
                     tuple(e["slots"]) if "slots" in e else e["slot"] for e in entry["inputs"])
    shape, dtype = slots[entry["output"]][:2]
    if "view" in entry:
        kind, arg = entry["view"]
        step = Step(entry["name"], "view", True, template, entry["output"], shape, dtype,
                    view=(kind, tuple(arg) if kind == "reshape" else arg))
        step.call = bind(view_function(step.view), list(template))
    else:
        module = modules[entry["module"]]
        step = Step(entry["name"], entry["type"], entry["native"], template, entry["output"],
                    shape, dtype, module, entry["kwargs"])
        qparams = [q for *_, q in slots]
        step.call = (bind(module.graph_step(*_stand_ins(template, slots)), list(template))
                     if entry["native"] else
                     bind_module(module, list(template), step.kwargs, qparams))
    return step


def _stand_ins(template, slots):
    return [[_stand_in(slots[i]) for i in t] if isinstance(t, tuple) else _stand_in(slots[t])
            for t in template]
