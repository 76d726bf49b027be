"""Optional: files written by torch.save itself load identically (skips without torch)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tianyuan.weights import load_pth, load_weights  # noqa: E402
from zoo_specs import spec  # noqa: E402  (the built models, torchvision's names)


def _tensors():
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=gen)
    return {
        "f32": base, "t": base.t(), "slice": base[1:5:2, ::2], "f64": base.double(),
        "f16": base.half(), "bf16": base.bfloat16(), "i64": torch.arange(-4, 8).reshape(3, 4),
        "i32": torch.arange(5, dtype=torch.int32), "i8": torch.arange(-3, 3, dtype=torch.int8),
        "u8": torch.arange(6, dtype=torch.uint8), "bool": torch.tensor([True, False]),
        "scalar": torch.tensor(3.5), "param": torch.nn.Parameter(torch.ones(2, 2)),
    }


def _expected(value):
    value = value.detach()
    if value.dtype == torch.bfloat16:
        value = value.float()
    return value.contiguous().numpy()


@pytest.mark.parametrize("zip_format", [True, False])
def test_torch_save_loads_identically(tmp_path, zip_format):
    tensors = _tensors()
    path = tmp_path / "t.pth"
    torch.save(tensors, path, _use_new_zipfile_serialization=zip_format)
    loaded = load_pth(path)
    for name, value in tensors.items():
        want = _expected(value)
        assert loaded[name].dtype == want.dtype and loaded[name].shape == want.shape, name
        np.testing.assert_array_equal(loaded[name], want, err_msg=name)


def test_torch_quantized_tensor(tmp_path):
    x = torch.randn(4, 3)
    q = torch.quantize_per_channel(x, torch.rand(4) + 0.1, torch.zeros(4, dtype=torch.long), 0,
                                   torch.qint8)
    path = tmp_path / "q.pth"
    torch.save({"w": q}, path)
    w = load_pth(path)["w"]
    np.testing.assert_array_equal(w.values, q.int_repr().numpy())
    np.testing.assert_allclose(w.dequantize(), q.dequantize().numpy(), rtol=1e-6)


@pytest.mark.parametrize("arch", ["resnet18", "resnet50", "mobilenet_v2", "shufflenet_v2_x1_0"])
def test_torchvision_state_dicts_import(tmp_path, arch):
    torchvision = pytest.importorskip("torchvision")
    model = getattr(torchvision.models, arch)()
    path = tmp_path / f"{arch}.pth"
    torch.save(model.state_dict(), path)
    ours = load_weights(path, arch=arch, spec=spec(arch))    # our built model's names, shapes
    theirs = model.state_dict()
    assert list(ours) == list(theirs)
    for name, value in theirs.items():
        np.testing.assert_array_equal(ours[name], value.numpy(), err_msg=name)
