"""Graph files edited by hand or by an attacker (checksums made right again by re-saving):
every field is checked at load against what its op can take, and a trial run on zeros
catches what a step cannot run; each refusal is a SerializationError naming the file."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import jit, nn
from tianyuan.io.serialization import SerializationError

from tests.framework.test_jit import batch, int8_tiny


@pytest.fixture(scope="module")
def int8_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "int8.graph"
    model = int8_tiny()
    jit.trace(model.eval(), batch(0)).save(path)
    return path


def _edited(path, tmp_path, edit):
    data = ty.load(path)
    edit(data)
    out = tmp_path / "edited.graph"
    ty.save(data, out)
    return out


def _module(data, class_suffix):
    return next(m for m in data["modules"] if m["class"].endswith(class_suffix))


def _set_zero_point(data, value):
    conv = _module(data, ".ConvReLU2d") if any(
        m["class"].endswith(".ConvReLU2d") for m in data["modules"]) else data["modules"][1]
    conv["buffers"]["zero_point"] = np.asarray(value, np.int64)


def _as_int8(data, zero_point):
    """The first int8 module's dtype_name edited from uint8 to int8 (and its zero point)."""
    module = next(m for m in data["modules"] if "dtype_name" in m["config"])
    module["config"]["dtype_name"] = "int8"
    module["buffers"]["zero_point"] = np.asarray(zero_point, np.int64)


def _first_quantized_slot(data):
    return next(s for s in data["slots"] if s["qparams"] is not None)


EDITS = [
    (lambda d: _first_quantized_slot(d).__setitem__("qparams", [0.1, 256]),
     "zero point 256"),
    (lambda d: _first_quantized_slot(d).__setitem__("qparams", [float("nan"), 3]),
     "finite scale > 0"),
    (lambda d: d["slots"][0].__setitem__("shape", [2, 3, 1 << 40, 1 << 20]),
     "a graph slot holds at most"),
    (lambda d: d["slots"][0].__setitem__("dtype", "object"), "has dtype 'object'"),
    (lambda d: d["slots"][0].__setitem__("shape", [2, -3, 16, 16]), "sizes >= 0"),
    (lambda d: d.__setitem__("outputs", {"kind": "dict", "slots": [1]}),
     "the outputs are a 'dict'"),
    (lambda d: _set_zero_point(d, 300), "zero point 300 is outside"),
    (lambda d: _as_int8(d, 141), "an int8 output of dtype 'int8' with zero point 141"),
    (lambda d: _as_int8(d, 0), "writes int8, but its output slot is uint8"),
    (lambda d: _module(d, ".AvgPool2d")["config"].__setitem__("kernel_size", "x"),
     "cannot run"),
    (lambda d: _module(d, ".AvgPool2d")["config"].pop("stride"), "no attribute 'stride'"),
]


@pytest.mark.parametrize("edit, says", EDITS)
def test_an_edited_int8_graph_is_refused_at_load(int8_file, tmp_path, edit, says):
    edited = _edited(int8_file, tmp_path, edit)
    with pytest.raises(SerializationError, match=f"runtime.load: {edited}.*{says}"):
        ty.runtime.load(edited)


def test_a_binding_refusing_a_value_is_one_line(int8_file, tmp_path):
    """Found by tests/test_fuzz_files.py: a padding of 10**30 made the int8 conv's binding
    raise a TypeError listing its signatures and the weights, over many lines."""
    edited = _edited(int8_file, tmp_path, lambda d: _module(d, ".ConvBnReLU62d")["config"]
                     .__setitem__("padding", (1, 1, 1, 10 ** 30)))
    with pytest.raises(SerializationError, match=f"runtime.load: {edited}.*TypeError") as info:
        ty.runtime.load(edited)
    assert "\n" not in str(info.value)


def test_the_unedited_file_loads_and_runs(int8_file):
    graph = ty.runtime.load(int8_file)
    assert graph(batch(1)).shape == (2, 10)


def test_groups_zero_is_refused_not_a_zero_division(tmp_path):
    path = tmp_path / "conv.graph"
    jit.trace(nn.Sequential(nn.Conv2d(4, 4, 3, groups=2)).eval(), batch(0, c=4)).save(path)
    edited = _edited(path, tmp_path, lambda d: d["modules"][0]["children"]["0"]["config"]
                     .__setitem__("groups", 0) if d["modules"][0]["children"] else
                     d["modules"][0]["config"].__setitem__("groups", 0))
    with pytest.raises(SerializationError, match=str(edited)):
        ty.runtime.load(edited)


# ------------------------------------------------------------------ the memory plan (issue 56)

@pytest.fixture(scope="module")
def float_file(tmp_path_factory):
    """A float graph whose ReLUs and residual add run in place, and its plan."""
    from tests.quantization.qnets import TinyNet
    path = tmp_path_factory.mktemp("g") / "float.graph"
    ty.manual_seed(0)
    graph = jit.trace(TinyNet().eval(), batch(0))
    graph.save(path)
    return path, graph.memory


def _buffer(data, slot):
    return next(b for b in data["memory"]["buffers"] if b[0] == slot)


def _live_together(plan):
    """Two buffers live at one step: (a, b)."""
    slots = sorted(plan.live)
    return next((a, b) for a in slots for b in slots if a < b and plan.sizes[a] and
                plan.sizes[b] and plan.live[a][0] <= plan.live[b][1] and
                plan.live[b][0] <= plan.live[a][1])


PLAN_EDITS = [
    ("overlap", lambda d, plan: _buffer(d, _live_together(plan)[1]).__setitem__(
        1, _buffer(d, _live_together(plan)[0])[1]), "live together at step .* overlap"),
    ("past the arena", lambda d, plan: _buffer(d, max(plan.offsets)).__setitem__(
        1, d["memory"]["arena"]), "inside the .*-byte arena"),
    ("misaligned", lambda d, plan: _buffer(d, max(plan.offsets)).__setitem__(1, 3),
     "not an aligned place"),
    ("wrong size", lambda d, plan: _buffer(d, max(plan.offsets)).__setitem__(
        2, plan.sizes[max(plan.offsets)] - 64), "bytes; it holds"),
    ("huge arena", lambda d, plan: d["memory"].__setitem__("arena", 1 << 60),
     "not an integer in"),
    ("missing buffer", lambda d, plan: d["memory"]["buffers"].pop(), "places no buffer"),
    ("unknown slot", lambda d, plan: d["memory"]["buffers"].append([10 ** 6, 0, 64]),
     "no buffer of the graph"),
    ("a float", lambda d, plan: d["memory"]["buffers"][0].__setitem__(1, 0.5),
     "list of 3 integers"),
    ("not a record", lambda d, plan: d.__setitem__("memory", "x"), "must be a record"),
    ("in place where it may not", lambda d, plan: d["memory"]["inplace"].append([1, 0]),
     "may not compute into slot"),
    ("in place twice", lambda d, plan: d["memory"]["inplace"].append(
        d["memory"]["inplace"][0]), "twice"),
]


@pytest.mark.parametrize("what, edit, says", PLAN_EDITS, ids=[e[0] for e in PLAN_EDITS])
def test_an_edited_memory_plan_is_refused_at_load(float_file, tmp_path, what, edit, says):
    path, plan = float_file
    edited = _edited(path, tmp_path, lambda d: edit(d, plan))
    with pytest.raises(SerializationError, match=f"runtime.load: {edited}: its memory plan "
                       f"does not fit the graph: .*{says}") as info:
        ty.runtime.load(edited)
    assert "\n" not in str(info.value)


def test_a_truncated_graph_file_is_refused(float_file, tmp_path):
    path, _ = float_file
    data = open(path, "rb").read()
    for keep in (0, 7, 100, len(data) // 2, len(data) - 1):
        cut = tmp_path / f"cut{keep}.graph"
        cut.write_bytes(data[:keep])
        with pytest.raises(SerializationError, match=str(cut)):
            ty.runtime.load(cut)
