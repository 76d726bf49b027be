"""Optional: our models given torchvision's randomly initialised weights give its logits.

Skipped unless torch and torchvision are installed (`pip install .[bench]`).
"""
import numpy as np
import pytest

import tianyuan as ty
from tianyuan import zoo
from tianyuan.trainers import cli

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")


def _torchvision_model(arch):
    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(weights=None)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():   # non-trivial BN statistics and affine terms
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                shape = module.running_mean.shape
                module.running_mean.copy_(torch.randn(shape, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(shape, generator=generator) + 0.5)
                module.weight.copy_(torch.rand(shape, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(shape, generator=generator) * 0.1)
    return model.eval()


@pytest.mark.parametrize("arch", ["resnet18", "resnet50", "mobilenet_v2", "shufflenet_v2_x1_0"])
def test_same_logits_as_torchvision(arch, tmp_path):
    theirs_model = _torchvision_model(arch)
    # the user's path: torch.save -> `tianyuan weights import` (torch-free reader) -> zoo
    torch.save(theirs_model.state_dict(), tmp_path / "theirs.pth")
    out = tmp_path / "ours.safetensors"
    assert cli.main(["weights", "import", str(tmp_path / "theirs.pth"), "--arch", arch,
                     "--format", "torchvision", "--out", str(out)]) == 0
    ours_model = zoo.get_model(arch, weights=str(out)).eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 96, 96)).astype(np.float32)
    with torch.no_grad():
        theirs = theirs_model(torch.from_numpy(x)).numpy()
    with ty.no_grad():
        ours = ours_model(ty.Tensor(x)).numpy()
    assert ours.shape == theirs.shape == (2, 1000)
    error = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert error < 1e-4, f"{arch}: max relative error {error:.2e}"


def test_resnet50_features_are_torchvisions_intermediate_layers(tmp_path):
    """forward_features' C2-C5 are torchvision's IntermediateLayerGetter outputs of
    layer1-layer4 (what its detection `backbone.body` returns), within 1e-4."""
    from torchvision.models._utils import IntermediateLayerGetter
    theirs_model = _torchvision_model("resnet50")
    layers = {"layer1": "C2", "layer2": "C3", "layer3": "C4", "layer4": "C5"}
    body = IntermediateLayerGetter(theirs_model, return_layers=layers).eval()
    torch.save(theirs_model.state_dict(), tmp_path / "theirs.pth")
    ours_model = zoo.get_backbone("resnet50", weights=str(tmp_path / "theirs.pth")).eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 96, 128)).astype(np.float32)
    with torch.no_grad():
        theirs = {k: v.numpy() for k, v in body(torch.from_numpy(x)).items()}
    with ty.no_grad():
        ours = {k: v.numpy() for k, v in ours_model.forward_features(ty.Tensor(x)).items()}
    assert list(ours) == list(theirs) == ["C2", "C3", "C4", "C5"]
    for key, stride in ours_model.feature_strides.items():
        assert ours[key].shape == theirs[key].shape == (
            2, ours_model.feature_channels[key], 96 // stride, 128 // stride)
        error = np.abs(ours[key] - theirs[key]).max() / np.abs(theirs[key]).max()
        assert error < 1e-4, f"{key}: max relative error {error:.2e}"
