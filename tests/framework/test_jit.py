"""jit.trace: the recorded graph gives the model's result bit for bit on new inputs (float and
int8), runs int8 modules as native steps, follows views, and refuses what it cannot record."""
import numpy as np
import pytest

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import jit, nn
from tianyuan import quantization as Q
from tianyuan.jit import TraceError
from tianyuan.quantization.qarray import quantized_tensor

from tests.quantization.qnets import TinyNet


def batch(seed, n=2, c=3, size=16):
    return ty.tensor(np.random.default_rng(seed).standard_normal((n, c, size, size))
                     .astype(np.float32))


def int8_tiny(seed=0):
    ty.manual_seed(seed)
    qat = Q.quantize_qat(TinyNet())
    Q.calibrate(qat, [batch(s).numpy() for s in range(2)])
    return Q.quantize(qat)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.numpy(), b.numpy())


def test_int8_graph_matches_model_on_new_inputs():
    model = int8_tiny()
    graph = jit.trace(model, batch(10))
    assert all(s.native for s in graph.steps)                 # every int8 module natively
    assert "Identity" not in {s.type for s in graph.steps}     # fused-away BN/ReLU: no steps
    with ty.no_grad():
        for seed in (11, 12):
            assert same(graph(batch(seed)), model(batch(seed)))
        assert same(graph(batch(13).numpy()), model(batch(13)))   # a numpy array as input


def test_float_graph_matches_model():
    ty.manual_seed(1)
    model = TinyNet().eval()
    graph = jit.trace(model, batch(3))
    with ty.no_grad():
        assert same(graph(batch(4)), model(batch(4)))
    assert "conv1 [Conv2d, module]" in repr(graph)


class Views(nn.Module):
    """Slices (F.split), a reshape and a tuple result: views of traced tensors."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 2, 1), nn.Conv2d(2, 3, 1)
        self.cat = nn.Concat(1)

    def forward(self, x):                  # x (N, 4, H, W)
        x1, x2 = F.split(x, 2, axis=1)     # views of the input
        y = self.cat([self.a(x), self.b(x2)])
        return y.reshape(y.shape[0], -1), x1


def test_views_are_followed():
    model = Views().eval()
    graph = jit.trace(model, batch(0, c=4, size=5))
    assert sum(s.type == "view" for s in graph.steps) == 3   # x2, x1, the reshape
    with ty.no_grad():
        got, want = graph(batch(1, c=4, size=5)), model(batch(1, c=4, size=5))
    assert isinstance(got, tuple) and all(same(g, w) for g, w in zip(got, want))


class OpOutside(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 3, 1), nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return self.b(self.a(x) * 2.0)     # an op no module records


def test_op_outside_modules_is_refused_naming_the_module():
    with pytest.raises(TraceError, match="module 'b'.*outside a module"):
        jit.trace(OpOutside().eval(), batch(0))


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 3, 1), nn.Conv2d(3, 3, 1)

    def forward(self, x):
        y = self.a(x)
        y.data += 1.0                      # invisible to the trace: the check catches it
        return self.b(y)


def test_the_final_check_catches_what_the_trace_missed():
    with pytest.raises(TraceError, match="differs from the model's"):
        jit.trace(InPlace().eval(), batch(0))
    graph = jit.trace(InPlace().eval(), batch(0), check=False)   # on request: unchecked
    assert len(graph.steps) == 2


class BadStep(nn.Module):
    def forward(self, x):
        return x * 2.0

    def graph_step(self, x):
        return lambda a: a * 3.0           # not what forward does


def test_a_graph_step_is_checked_against_forward():
    with pytest.raises(TraceError, match="graph_step does not give"):
        jit.trace(BadStep().eval(), batch(0))


def test_input_and_mode_errors():
    model = int8_tiny()
    graph = jit.trace(model, batch(0))
    with pytest.raises(ValueError, match=r"traced for float32 \(2, 3, 16, 16\)"):
        graph(batch(0, n=3))
    with pytest.raises(TypeError, match="1 inputs, got 2"):
        graph(batch(0), batch(1))
    with pytest.raises(ValueError, match="training mode"):
        jit.trace(TinyNet(), batch(0))
    with pytest.raises(TypeError, match="input 0 is ndarray"):
        jit.trace(model, batch(0).numpy())
    # an int8 input must come with the traced scale and zero point
    x = quantized_tensor(batch(0, c=8, size=4), 0.05, 128, np.uint8)
    conv = jit.trace(model.branch_a, x)
    assert same(conv(x), model.branch_a(x))
    with pytest.raises(ValueError, match="zero point"):
        conv(quantized_tensor(batch(0, c=8, size=4), 0.05, 127, np.uint8))


def test_hooked_module_runs_as_a_module():
    model = int8_tiny()
    calls = []
    model.fc.register_forward_hook(lambda m, args, out: calls.append(out.shape))
    graph = jit.trace(model, batch(0))
    assert [s.name for s in graph.steps if not s.native] == ["fc"]
    calls.clear()
    graph(batch(1))
    assert calls == [(2, 10)]
    seen = []                                 # a hooked Identity is a step, its hook runs
    net = nn.Sequential(nn.Conv2d(3, 3, 1), nn.Identity()).eval()
    net[1].register_forward_hook(lambda m, args, out: seen.append(1))
    hooked = jit.trace(net, batch(0))
    assert [s.type for s in hooked.steps] == ["Conv2d", "Identity"]
    seen.clear()
    hooked(batch(1))
    assert seen == [1]


def test_a_hooked_graph_is_not_saved(tmp_path):
    model = int8_tiny()
    handle = model.fc.register_forward_hook(lambda m, args, out: None)
    with pytest.raises(ty.io.SerializationError, match="step 'fc'.*forward hooks"):
        jit.trace(model, batch(0)).save(tmp_path / "g.graph")
    handle.remove()
    jit.trace(model, batch(0)).save(tmp_path / "g.graph")


def _int8_with_float_fc(seed):
    """TinyNet in int8 but its fc, kept float by disable_quantize."""
    ty.manual_seed(seed)
    net = TinyNet()
    Q.disable_quantize(net.fc)
    qat = Q.quantize_qat(net)
    Q.calibrate(qat, [batch(s).numpy() for s in range(2)])
    return Q.quantize(qat)


def test_a_layer_kept_float_dequantizes_in_steps_of_its_own(tmp_path):
    """disable_quantize's pre-hook (dequantize the inputs) is a DequantStub step before the
    float layer, so the graph file, which holds no hooks, runs the same."""
    model = _int8_with_float_fc(1)
    graph = jit.trace(model, batch(0), dynamic_batch=True)
    assert [(s.name, s.type, s.native) for s in graph.steps][-3:] == [
        ("fc (dequantize input 0)", "DequantStub", True), ("fc", "Linear", False),
        ("dequant", "DequantStub", False)]
    graph.save(tmp_path / "g.graph")
    want = model(batch(1, n=3)).numpy()
    for g in (graph, ty.runtime.load(tmp_path / "g.graph")):
        np.testing.assert_array_equal(g(batch(1, n=3)).numpy(), want)


def test_intermediate_slots_are_freed_after_their_last_use():
    graph = jit.trace(int8_tiny(), batch(0))
    freed = [i for _, _, frees in graph._plan for i in frees]
    read = {i for s in graph.steps for e in s.inputs for i in (e if isinstance(e, tuple) else (e,))}
    assert sorted(freed) == sorted(read) and len(set(freed)) == len(freed)
    assert graph.outputs not in freed


class Increment(nn.Module):
    def forward(self, x):                  # in place, returning its input: a step still
        x.data += 1.0
        return x


class WithInPlaceModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.inc, self.b = nn.Conv2d(3, 3, 1), Increment(), nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return self.b(self.inc(self.a(x)))


def test_only_marked_modules_returning_their_input_are_skipped():
    model = WithInPlaceModule().eval()
    graph = jit.trace(model, batch(0))
    assert [s.type for s in graph.steps] == ["Conv2d", "Increment", "Conv2d"]
    with ty.no_grad():
        assert same(graph(batch(1)), model(batch(1)))


def test_a_float_layer_kept_in_an_int8_model():
    model = _int8_with_float_fc(0)
    graph = jit.trace(model, batch(0))
    assert [s.name for s in graph.steps if not s.native] == ["fc", "dequant"]
    with ty.no_grad():
        assert same(graph(batch(5)), model(batch(5)))


# ------------------------------------------------------------------ files and profiles

def test_saved_graph_runs_without_the_model(tmp_path):
    from tianyuan.io.serialization import SerializationError
    model = int8_tiny()
    graph = jit.trace(model, batch(0))
    graph.save(tmp_path / "tiny.graph")
    loaded = ty.runtime.load(tmp_path / "tiny.graph")
    assert [(s.name, s.native, s.inputs) for s in loaded.steps] == \
        [(s.name, s.native, s.inputs) for s in graph.steps]
    for seed in (21, 22):
        assert same(loaded(batch(seed)), graph(batch(seed)))
    views = Views().eval()
    jit.trace(views, batch(0, c=4, size=5)).save(tmp_path / "views.graph")
    got = ty.runtime.load(tmp_path / "views.graph")(batch(3, c=4, size=5))
    with ty.no_grad():
        assert all(same(g, w) for g, w in zip(got, views(batch(3, c=4, size=5))))
    with pytest.raises(SerializationError, match="holds tianyuan.nn modules only"):
        jit.trace(WithInPlaceModule().eval(), batch(0)).save(tmp_path / "x.graph")
    ty.save({"w": np.zeros(3)}, tmp_path / "weights.safetensors")
    with pytest.raises(SerializationError, match="not a saved graph"):
        ty.runtime.load(tmp_path / "weights.safetensors")


def test_a_graph_file_names_tianyuan_modules_only(tmp_path):
    from tianyuan.io.serialization import SerializationError
    graph = jit.trace(nn.Sequential(nn.ReLU()).eval(), batch(0))
    graph.save(tmp_path / "g.graph")
    data = ty.load(tmp_path / "g.graph")
    data["modules"][0]["class"] = "os.system"       # a file crafted to run something else
    ty.save(data, tmp_path / "evil.graph")
    with pytest.raises(SerializationError, match="names os.system"):
        ty.runtime.load(tmp_path / "evil.graph")
    data["modules"][0]["class"] = "tianyuan.nn.activatoin.ReLU"   # a damaged name
    ty.save(data, tmp_path / "damaged.graph")
    with pytest.raises(SerializationError, match="activatoin.ReLU, which this tianyuan has no"):
        ty.runtime.load(tmp_path / "damaged.graph")
    data = ty.load(tmp_path / "g.graph")
    data["modules"][0]["config"]["__class__"] = "x"
    ty.save(data, tmp_path / "evil.graph")
    with pytest.raises(SerializationError, match="sets .*__class__"):
        ty.runtime.load(tmp_path / "evil.graph")
    data = ty.load(tmp_path / "g.graph")
    data["steps"][0]["inputs"] = [{"slot": -1}]
    ty.save(data, tmp_path / "evil.graph")
    with pytest.raises(SerializationError, match="slots outside"):
        ty.runtime.load(tmp_path / "evil.graph")
    data = ty.load(tmp_path / "g.graph")
    del data["slots"]
    ty.save(data, tmp_path / "evil.graph")
    with pytest.raises(SerializationError, match="not a well-formed graph file"):
        ty.runtime.load(tmp_path / "evil.graph")


def test_profile_times_every_step():
    graph = jit.trace(int8_tiny(), batch(0))
    plan = list(graph._plan)
    stats = graph.profile(batch(1), repeats=3)
    assert graph._plan == plan                                # the timers are gone again
    assert [r["name"] for r in stats["rows"]] == [s.name for s in graph.steps]
    assert abs(sum(r["share"] for r in stats["rows"]) - 1.0) < 0.01
    assert stats["total_ms"] > 0 and stats["peak_mb"] > 0


# ------------------------------------------------------------------ fusion

def test_fuse_folds_what_the_model_would_fuse(tmp_path):
    ty.manual_seed(2)
    model = TinyNet().eval()
    for bn in (model.bn1, model.bn2, model.bn3, model.dw_bn):   # running stats not 0 / 1
        bn.running_mean.data[:] = np.random.default_rng(0).standard_normal(bn.num_features)
        bn.running_var.data[:] = 1.0 + np.random.default_rng(1).random(bn.num_features)
    plain = jit.trace(model, batch(0))
    assert jit.passes.fusion_groups(plain) == model.fuse_groups()
    fused = jit.trace(model, batch(0), fuse=True)
    assert len(fused.steps) == len(plain.steps) - 7          # 4 BNs and 3 activations folded
    assert "BatchNorm2d" not in {s.type for s in fused.steps}
    assert all(s.native for s in fused.steps if s.type.startswith("ConvBn"))  # folded convs
    with ty.no_grad():
        want = model(batch(6)).numpy()
    np.testing.assert_allclose(fused(batch(6)).numpy(), want, rtol=1e-4, atol=1e-5)
    assert type(model.conv1) is nn.Conv2d                     # the model itself untouched
    fused.save(tmp_path / "fused.graph")                      # fused modules round-trip
    assert same(ty.runtime.load(tmp_path / "fused.graph")(batch(6)), fused(batch(6)))


class SharedReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.relu = nn.Conv2d(3, 3, 1), nn.Conv2d(3, 3, 1), nn.ReLU()

    def forward(self, x):
        return self.relu(self.b(self.relu(self.a(x))))      # one ReLU called twice


def test_fuse_leaves_a_module_called_twice():
    graph = jit.trace(SharedReLU().eval(), batch(0), fuse=True)
    assert [s.type for s in graph.steps] == ["Conv2d", "ReLU", "Conv2d", "ReLU"]


def test_a_graph_file_runs_on_every_kernel_path(tmp_path):
    """Traced where int8 ResNet keeps channels-last (the VNNI engine), loaded where it does
    not: the steps take the layout they get, the values stay bit-exact."""
    from tianyuan import zoo
    ty.manual_seed(0)
    x = batch(0, size=32)
    qat = Q.quantize_qat(zoo.get_model("resnet18", num_classes=10))
    Q.calibrate(qat, [x.numpy(), batch(1, size=32).numpy()])
    graph = jit.trace(Q.quantize(qat), x)
    graph.save(tmp_path / "r18.graph")
    want = graph(batch(2, size=32))
    isa = ty.current_isa()
    try:
        for path in ty.available_isas():
            ty.set_isa(path)
            assert same(ty.runtime.load(tmp_path / "r18.graph")(batch(2, size=32)), want), path
    finally:
        ty.set_isa(isa)


# ------------------------------------------------------------------ batch sizes

def test_dynamic_batch_graph_runs_any_batch(tmp_path):
    model = int8_tiny()
    graph = jit.trace(model, batch(0), dynamic_batch=True)
    with ty.no_grad():
        for n in (1, 3, 5):
            assert same(graph(batch(n, n=n)), model(batch(n, n=n))), n
    graph.save(tmp_path / "any.graph")
    loaded = ty.runtime.load(tmp_path / "any.graph")
    assert loaded.dynamic_batch and same(loaded(batch(9, n=4)), graph(batch(9, n=4)))
    with pytest.raises(ValueError, match=r"traced for float32 \(N, 3, 16, 16\)"):
        graph(batch(0, size=8))
    views = Views().eval()
    graph = jit.trace(views, batch(0, c=4, size=5), dynamic_batch=True)
    with ty.no_grad():
        got, want = graph(batch(1, n=5, c=4, size=5)), views(batch(1, n=5, c=4, size=5))
    assert all(same(g, w) for g, w in zip(got, want))
    static = jit.trace(model, batch(0))
    with pytest.raises(ValueError, match=r"traced for float32 \(2, 3, 16, 16\)"):
        static(batch(0, n=3))


class AllButFirst(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        return self.a(x[1:])                # traced as items 1..2: not so for another batch


def test_dynamic_batch_refuses_a_batch_dependent_graph():
    with pytest.raises(TraceError, match="does not hold for batch 3"):
        jit.trace(AllButFirst().eval(), batch(0), dynamic_batch=True)
    assert len(jit.trace(AllButFirst().eval(), batch(0)).steps) == 2   # static: fine
