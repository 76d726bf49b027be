"""The static memory plan of a traced graph (jit/memory.py): its arena against the live sets,
planned graphs equal to unplanned ones bit for bit (float and int8 zoo classifiers), the plan
saved and checked on load, the profile's memory figures."""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import jit, nn, zoo
from tianyuan import quantization as Q
from tianyuan.jit import memory

from tests.framework.test_jit import batch, int8_tiny
from tests.quantization.qnets import TinyNet

CLASSIFIERS = ["resnet18", "mobilenet_v2", "shufflenet_v2_x0_5"]


def _image(seed, n=1, size=32):
    return ty.Tensor(np.random.default_rng(seed).standard_normal((n, 3, size, size))
                     .astype(np.float32))


def _roots(graph, x):
    with ty.no_grad():
        return memory.alias_roots(graph, graph._values([x]))[0]


def _consecutive_live(plan):
    """Per pair of neighbouring steps, the bytes of the buffers live at either of them."""
    steps = max(b for _, b in plan.live.values())
    return [sum(plan.sizes[s] for s, (a, b) in plan.live.items() if a <= k + 1 and b >= k)
            for k in range(steps)]


def test_resnet50_arena_fits_two_consecutive_live_sets():
    """The issue's bound, on ResNet-50 batch 1 (at 64 x 64 to stay fast: the same steps and
    lifetimes as at 224, smaller buffers): the arena is at most the largest two consecutive
    live sets together, and far below the sum of all activations."""
    ty.manual_seed(0)
    model = zoo.get_model("resnet50", num_classes=10).eval()
    x = _image(0, size=64)
    graph = jit.trace(model, x)
    plan = graph.memory
    assert plan.arena <= max(_consecutive_live(plan))
    assert plan.arena >= max(plan.live_bytes())      # no plan does better than one live set
    assert plan.arena < plan.total / 5
    assert len(plan.inplace) == 16 + 33                # every AddReLU and unfused ReLU
    memory.check(plan.to_json(), graph, _roots(graph, x))   # its own plan passes the checks


def test_offsets_are_aligned_and_live_buffers_disjoint():
    graph = jit.trace(TinyNet().eval(), batch(0))
    plan = graph.memory
    assert all(o % memory.ALIGNMENT == 0 for o in plan.offsets.values())
    for k in range(len(graph.steps)):
        live = sorted((plan.offsets[s], plan.offsets[s] + plan.sizes[s])
                      for s, (a, b) in plan.live.items() if a <= k <= b and plan.sizes[s])
        assert all(end <= begin for (_, end), (begin, _) in zip(live, live[1:]))


def test_greedy_by_size_fills_the_smallest_gap():
    """Three buffers live together leave gaps; a later one goes to the smallest that fits."""
    live = {0: [0, 1], 1: [0, 3], 2: [1, 3], 3: [2, 3], 4: [2, 3]}
    sizes = {0: 256, 1: 512, 2: 192, 3: 128, 4: 64}
    offsets = memory.greedy_by_size(live, sizes)
    assert offsets[1] == 0 and offsets[0] == 512 and offsets[2] == 768
    assert offsets[3] == 512 and offsets[4] == 640   # in buffer 0's place once it is dead


def _planned_and_unplanned(graph, x):
    planned = graph(x)
    plan = graph.memory
    graph.use_memory_plan(None)
    try:
        unplanned = graph(x)
    finally:
        graph.use_memory_plan(plan)
    return planned, unplanned


def _int8(model, size):
    qat = Q.quantize_qat(model)
    Q.calibrate(qat, [_image(s, 2, size).numpy() for s in range(2)])
    return Q.quantize(qat).eval()


@pytest.mark.parametrize("precision", ["fp32", "fp32-fused", "int8"])
@pytest.mark.parametrize("name", CLASSIFIERS)
def test_planned_graph_equals_unplanned_bit_for_bit(name, precision):
    ty.manual_seed(0)
    model = zoo.get_model(name, num_classes=10).eval()
    if precision == "int8":
        model = _int8(model, 32)
    graph = jit.trace(model, _image(0), fuse=precision == "fp32-fused")
    x = _image(1)
    planned, unplanned = _planned_and_unplanned(graph, x)
    assert planned.dtype == unplanned.dtype
    np.testing.assert_array_equal(planned.numpy(), unplanned.numpy())
    if precision == "fp32":
        assert graph.memory.inplace                  # the ReLUs and adds run in place


def test_an_in_place_step_leaves_a_value_read_later_alone():
    """A ReLU whose input another step reads later is not run in place."""
    class Fork(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.relu, self.add = nn.Conv2d(3, 3, 1), nn.ReLU(), nn.Add()

        def forward(self, x):
            y = self.conv(x)
            return self.add(self.relu(y), y)

    graph = jit.trace(Fork().eval(), batch(0))
    relu = next(k for k, s in enumerate(graph.steps) if s.type == "ReLU")
    add = next(k for k, s in enumerate(graph.steps) if s.type == "Add")
    assert relu not in dict(graph.memory.inplace)
    assert add in dict(graph.memory.inplace)         # y is dead after the add
    planned, unplanned = _planned_and_unplanned(graph, batch(1))
    np.testing.assert_array_equal(planned.numpy(), unplanned.numpy())


@pytest.mark.parametrize("make", [int8_tiny, lambda: TinyNet().eval()], ids=["int8", "fp32"])
def test_the_plan_is_saved_and_reloaded(make, tmp_path):
    graph = jit.trace(make(), batch(0))
    graph.save(tmp_path / "g.graph")
    loaded = ty.runtime.load(tmp_path / "g.graph")
    assert loaded.memory.to_json() == graph.memory.to_json()
    np.testing.assert_array_equal(loaded(batch(1)).numpy(), graph(batch(1)).numpy())


def test_a_file_without_a_plan_is_planned_at_load(tmp_path):
    graph = jit.trace(TinyNet().eval(), batch(0))
    graph.save(tmp_path / "g.graph")
    data = ty.load(tmp_path / "g.graph")
    data["memory"] = None
    ty.save(data, tmp_path / "bare.graph")
    assert ty.runtime.load(tmp_path / "bare.graph").memory.to_json() == \
        graph.memory.to_json()


def test_profile_reports_arena_activations_and_peak():
    graph = jit.trace(TinyNet().eval(), batch(0))
    stats = graph.profile(batch(1), repeats=2)
    assert 0 < stats["arena_mb"] < stats["activations_mb"]
    assert stats["inplace"] == len(graph.memory.inplace)
    assert stats["peak_rss_mb"] is None or stats["peak_rss_mb"] >= 0
    assert stats["allocating"] and "ReLU" not in stats["allocating"]


def test_run_profile_prints_the_memory_plan(tmp_path, capsys):
    from tianyuan.trainers import run_graph
    jit.trace(TinyNet().eval(), batch(0)).save(tmp_path / "g.graph")
    assert run_graph.main([str(tmp_path / "g.graph"), "--profile", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "arena" in out and "all activations" in out and "peak (RSS rise)" in out
    assert "steps that allocate" in out


def test_clamp_and_add_clamp_write_into_out():
    """The in-place kernels: the native clamp's bits, into the given array (the input)."""
    from tianyuan import _C
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    x.flat[:3] = [-0.0, np.nan, 9.0]
    b = rng.standard_normal(x.shape).astype(np.float32)
    for want, run in [(_C.clamp(x, 0.0, 6.0), lambda a: _C.clamp(a, 0.0, 6.0, out=a)),
                      (_C.add_clamp(x, b, 0.0, np.inf),
                       lambda a: _C.add_clamp(a, b, 0.0, np.inf, out=a))]:
        a = x.copy()
        assert run(a) is a
        assert np.array_equal(a.view(np.uint32), want.view(np.uint32))
    with pytest.raises(ValueError, match="out must be a writeable C-contiguous float32"):
        _C.clamp(x, 0.0, 6.0, out=np.empty((2, 3), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        _C.clamp(x, 0.0, 6.0, out=x.transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2))
