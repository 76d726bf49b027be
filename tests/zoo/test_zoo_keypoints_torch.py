"""Optional: SimpleBaseline-R50 given a PyTorch reference's randomly initialised weights
(torchvision's ResNet-50 + the official deconv head, written here) returns its heatmaps.

Skipped unless torch and torchvision are installed (`pip install .[bench]`).
"""
import numpy as np
import pytest

from tianyuan import zoo
from tianyuan.trainers import cli

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")


class PoseResNet(torch.nn.Module):
    """Xiao et al.'s PoseResNet: torchvision's ResNet-50 layers at the top level, three
    ConvTranspose2d(256, 4, 2, 1, bias=False) + BN + ReLU, a 1x1 conv to 17 heatmaps."""

    def __init__(self):
        super().__init__()
        resnet = torchvision.models.resnet50(weights=None)
        for name in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4"):
            setattr(self, name, getattr(resnet, name))
        layers, width = [], 2048
        for _ in range(3):
            layers += [torch.nn.ConvTranspose2d(width, 256, 4, 2, 1, 0, bias=False),
                       torch.nn.BatchNorm2d(256), torch.nn.ReLU(inplace=True)]
            width = 256
        self.deconv_layers = torch.nn.Sequential(*layers)
        self.final_layer = torch.nn.Conv2d(256, 17, 1, 1, 0)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.final_layer(self.deconv_layers(x))


def _reference():
    torch.manual_seed(0)
    model = PoseResNet()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():   # non-trivial BN statistics and a head larger than its init
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                shape = module.running_mean.shape
                module.running_mean.copy_(torch.randn(shape, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(shape, generator=generator) + 0.5)
                module.weight.copy_(torch.rand(shape, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(shape, generator=generator) * 0.1)
            elif isinstance(module, torch.nn.ConvTranspose2d):
                module.weight.normal_(0, 0.02, generator=generator)
    return model.eval()


def test_same_heatmaps_as_a_pytorch_pose_resnet(tmp_path):
    theirs_model = _reference()
    # the official release's container: a DataParallel `module.` under `state_dict`
    state = {"module." + k: v for k, v in theirs_model.state_dict().items()}
    torch.save({"epoch": 140, "state_dict": state}, tmp_path / "pose_resnet_50_256x192.pth.tar")
    out = tmp_path / "ours.safetensors"
    assert cli.main(["weights", "import", str(tmp_path / "pose_resnet_50_256x192.pth.tar"),
                     "--arch", "simplebaseline_res50", "--format", "torchvision",
                     "--out", str(out)]) == 0
    ours_model = zoo.get_model("simplebaseline_res50", weights=str(out)).eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 128, 96)).astype(np.float32)
    with torch.no_grad():
        theirs = theirs_model(torch.from_numpy(x)).numpy()
    import tianyuan as ty
    ours = ours_model(ty.tensor(x)).numpy()
    assert ours.shape == theirs.shape == (2, 17, 32, 24)
    # within 1e-4 of the heatmaps' scale (here ~50: float32's rounding over 50 layers)
    scale = np.abs(theirs).max()
    assert np.abs(ours - theirs).max() <= 1e-4 * scale, (np.abs(ours - theirs).max(), scale)
