from collections import OrderedDict

import numpy as np
import pytest

import tianyuan as ty
from tianyuan import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4)
        self.scale = nn.Parameter(ty.ones(1))
        self.register_buffer("steps", ty.zeros(1))
        self.register_buffer("cache", ty.zeros(2), persistent=False)

    def forward(self, x):
        return self.bn(self.fc(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(2, 3, bias=False)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Sequential(OrderedDict(act=nn.ReLU(), out=nn.Linear(4, 1)))

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)[:, :3]
        return self.head(ty.concat([x, x[:, :1]], axis=1))


BLOCK_KEYS = ["scale", "steps", "fc.weight", "fc.bias", "bn.weight", "bn.bias", "bn.running_mean",
              "bn.running_var", "bn.num_batches_tracked"]
NET_KEYS = (["stem.weight"] + [f"blocks.{i}.{k}" for i in range(2) for k in BLOCK_KEYS]
            + ["head.out.weight", "head.out.bias"])


def test_state_dict_names_order_and_copies():
    net = Net()
    state = net.state_dict()
    assert list(state) == NET_KEYS
    assert isinstance(state, OrderedDict)
    assert all(isinstance(v, np.ndarray) for v in state.values())
    assert state["blocks.0.fc.weight"].shape == (4, 3)
    assert state["blocks.1.bn.num_batches_tracked"].shape == ()
    assert state["blocks.1.bn.num_batches_tracked"].dtype == np.int64
    state["stem.weight"][...] = 7
    assert not (net.stem.weight.numpy() == 7).any()      # a copy
    assert net.state_dict(keep_vars=True)["stem.weight"] is net.stem.weight


def test_registration_and_iteration():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == [k for k in NET_KEYS if "running" not in k and "steps" not in k
                     and "num_batches" not in k]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert [n for n, _ in net.blocks[0].named_buffers()] == [
        "steps", "cache", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert [n for n, _ in net.named_children()] == ["stem", "blocks", "head"]
    assert [n for n, _ in net.named_modules()][:5] == ["", "stem", "blocks", "blocks.0",
                                                        "blocks.0.fc"]
    assert len(list(net.modules())) == 12
    assert [n for n, _ in net.named_parameters(prefix="model", recurse=False)] == []
    assert [n for n, _ in net.stem.named_parameters(prefix="stem")] == ["stem.weight"]
    assert net.get_submodule("blocks.1.bn") is net.blocks[1].bn
    assert net.head.out is net.head[1]


def test_reassignment_and_none_parameters():
    m = nn.Linear(2, 2, bias=False)
    assert m.bias is None and "bias" not in m.state_dict()
    m.weight = nn.Parameter(ty.zeros(2, 2))
    assert m.state_dict()["weight"].sum() == 0
    with pytest.raises(TypeError, match="parameter 'weight'"):
        m.weight = ty.zeros(2, 2)
    m.extra = nn.ReLU()
    assert "extra" in dict(m.named_children())
    m.extra = nn.Parameter(ty.ones(1))            # moves from child to parameter
    assert "extra" not in dict(m.named_children()) and "extra" in m.state_dict()
    del m.extra
    assert "extra" not in m.state_dict()
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        m.missing
    with pytest.raises(KeyError, match="without '.'"):
        m.register_buffer("a.b", ty.zeros(1))


def test_shared_parameter_listed_once():
    a = nn.Linear(2, 2)
    net = nn.Sequential(a, nn.ReLU(), a)
    assert len(list(net.parameters())) == 2
    assert list(net.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_load_state_dict_round_trip_in_place():
    src, dst = Net(), Net()
    weight = dst.stem.weight
    result = dst.load_state_dict(src.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert dst.stem.weight is weight
    for key, value in src.state_dict().items():
        np.testing.assert_array_equal(dst.state_dict()[key], value)
    dst.load_state_dict({k: ty.tensor(v) for k, v in src.state_dict().items()})


def test_load_state_dict_strict_names_every_problem():
    net = Net()
    state = net.state_dict()
    del state["stem.weight"], state["blocks.1.bn.running_var"]
    state["head.out.extra"] = np.zeros(1)
    state["blocks.0.fc.weight"] = np.zeros((5, 3), np.float32)
    before = net.state_dict()
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(state)
    message = str(info.value)
    for text in ["stem.weight", "blocks.1.bn.running_var", "head.out.extra", "missing key",
                 "unexpected key", "size mismatch for blocks.0.fc.weight",
                 "checkpoint shape (5, 3)", "model shape (4, 3)"]:
        assert text in message
    for key, value in before.items():                   # nothing copied on error
        np.testing.assert_array_equal(net.state_dict()[key], value)


def test_load_state_dict_non_strict():
    net = Net()
    state = net.state_dict()
    del state["stem.weight"]
    state["bogus"] = np.zeros(1)
    missing, unexpected = net.load_state_dict(state, strict=False)
    assert missing == ["stem.weight"] and unexpected == ["bogus"]
    state["head.out.bias"] = np.zeros(3)
    with pytest.raises(RuntimeError, match=r"size mismatch for head.out.bias.*\(3,\).*\(1,\)"):
        net.load_state_dict(state, strict=False)


@pytest.mark.parametrize("edit", [lambda a: a.view(np.int32),        # F32 edited to I32
                                  lambda a: a.astype(np.complex64),
                                  lambda a: a > 0,
                                  lambda a: a.astype(object)])
def test_load_state_dict_refuses_a_dtype_that_cannot_be_the_parameters(edit):
    """A weights file whose header says I32 where the model has float32 had loaded, the
    integers cast into float weights (logits ~3e9); nothing is copied on refusal."""
    net = Net()
    state, before = net.state_dict(), net.state_dict()
    state["stem.weight"] = edit(state["stem.weight"])
    with pytest.raises(RuntimeError, match=r"stem.weight is \w+ in the state dict, but the "
                                           r"model's is float32: refusing to cast"):
        net.load_state_dict(state)
    for key, value in before.items():
        np.testing.assert_array_equal(net.state_dict()[key], value)


def test_load_state_dict_takes_half_precision_and_other_integer_widths():
    src, dst = Net(), Net()
    state = {k: v.astype(np.float16) if v.dtype == np.float32 else v.astype(np.int32)
             for k, v in src.state_dict().items()}
    dst.load_state_dict(state)
    np.testing.assert_array_equal(dst.state_dict()["stem.weight"],
                                  src.state_dict()["stem.weight"].astype(np.float16))
    state["blocks.1.bn.num_batches_tracked"] = np.float32(3.0)
    with pytest.raises(RuntimeError, match="num_batches_tracked is float32"):
        dst.load_state_dict(state)


def test_train_eval_propagate():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.blocks.train()
    assert net.blocks[1].bn.training and not net.training


def test_forward_hooks_and_removal():
    net = Net()
    seen = []
    h1 = net.blocks[0].register_forward_hook(lambda m, args, out: seen.append(out.shape))
    h2 = net.stem.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    h3 = net.head.register_forward_hook(lambda m, args, out: out + 100)
    out = net(ty.randn(5, 2))
    assert seen == [(5, 4)]
    np.testing.assert_allclose(out.numpy()[:, 0], net.head.out.bias.numpy()[0] + 100, atol=1e-5)
    for h in (h1, h2, h3):
        h.remove()
    net(ty.randn(5, 2))
    assert seen == [(5, 4)]
    with net.stem.register_forward_hook(lambda m, a, o: seen.append("x")):
        net(ty.randn(5, 2))
    net(ty.randn(5, 2))
    assert seen == [(5, 4), "x"]


def test_zero_grad_apply_requires_grad_and_astype():
    net = Net()
    net(ty.randn(4, 2)).sum().backward()
    assert net.stem.weight.grad is not None
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    visited = []
    assert net.apply(lambda m: visited.append(type(m).__name__)) is net
    assert visited[-1] == "Net" and visited[0] == "Linear"
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    weight = net.stem.weight
    net.double()
    assert net.stem.weight is weight and weight.dtype == np.float64
    assert net.blocks[0].bn.num_batches_tracked.dtype == np.int64


def test_repr_is_readable():
    text = repr(Net())
    assert "(blocks): ModuleList(" in text
    assert "(0): Block(" in text
    assert "(fc): Linear(in_features=3, out_features=4, bias=True)" in text
    assert "(out): Linear(in_features=4, out_features=1, bias=True)" in text
    assert repr(nn.ReLU()) == "ReLU()"
    assert "Parameter containing" in repr(nn.Parameter(ty.ones(1)))


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear)
    assert isinstance(seq[1:], nn.Sequential) and len(seq[1:]) == 2
    assert [n for n, _ in seq[1:].named_children()] == ["1", "2"]
    seq.append(nn.Sigmoid())
    assert seq(ty.randn(4, 2)).shape == (4, 1)
    with pytest.raises(IndexError, match="Sequential: index 9 is out of range for length 4"):
        seq[9]
    mlist = nn.ModuleList([nn.ReLU()])
    mlist.extend([nn.Tanh()])
    mlist.insert(0, nn.Identity())
    assert [type(m).__name__ for m in mlist] == ["Identity", "ReLU", "Tanh"]
    assert [n for n, _ in mlist.named_children()] == ["0", "1", "2"]
    del mlist[0]
    assert [type(m).__name__ for m in mlist] == ["ReLU", "Tanh"]
    mdict = nn.ModuleDict({"a": nn.Linear(1, 1)})
    mdict["b"] = nn.Linear(1, 2)
    assert list(mdict) == ["a", "b"] and "b" in mdict and len(mdict) == 2
    assert list(mdict.state_dict()) == ["a.weight", "a.bias", "b.weight", "b.bias"]


def test_module_without_init_call_errors():
    class Broken(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(1, 1)

    with pytest.raises(AttributeError, match="super"):
        Broken()
