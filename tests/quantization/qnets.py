"""A tiny QAT-ready conv net (every quantization point the zoo uses) and its training."""
import numpy as np

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn, optim
from tianyuan.datasets.synthetic import make_shapes
from tianyuan.quantization.observer import QParams
from tianyuan.nn.quantized import QuantizedModule
from tianyuan.quantization.qarray import dequantize_tensor


class TinyNet(nn.Module):
    """stem conv-bn-relu, max pool, a residual block (AddReLU), a two-branch concat with a
    ReLU6 branch and a depthwise conv, global pool, linear: (N, 3, 16, 16) -> (N, 10)."""

    def __init__(self, width=8, num_classes=10):
        super().__init__()
        w = width
        self.quant = nn.QuantStub()
        self.conv1, self.bn1, self.relu = nn.Conv2d(3, w, 3, padding=1, bias=False), \
            nn.BatchNorm2d(w), nn.ReLU()
        self.pool = nn.MaxPool2d(2)                                    # (N, w, 8, 8)
        self.conv2, self.bn2, self.relu2 = nn.Conv2d(w, w, 3, padding=1, bias=False), \
            nn.BatchNorm2d(w), nn.ReLU()
        self.conv3, self.bn3 = nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w)
        self.add_relu = nn.AddReLU()
        self.branch_a = nn.Conv2d(w, w, 1)                             # plain conv, bias
        self.dw, self.dw_bn, self.dw_relu6 = nn.Conv2d(w, w, 3, padding=1, groups=w,
                                                       bias=False), nn.BatchNorm2d(w), nn.ReLU6()
        self.cat = nn.Concat(1)                                        # (N, 2w, 8, 8)
        self.avg = nn.AvgPool2d(2)                                     # (N, 2w, 4, 4)
        self.gap, self.flatten = nn.AdaptiveAvgPool2d(1), nn.Flatten()
        self.fc = nn.Linear(2 * w, num_classes)
        self.dequant = nn.DequantStub()

    def fuse_groups(self):
        return [["conv1", "bn1", "relu"], ["conv2", "bn2", "relu2"], ["conv3", "bn3"],
                ["dw", "dw_bn", "dw_relu6"]]

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(self.quant(x)))))
        y = self.bn3(self.conv3(self.relu2(self.bn2(self.conv2(x)))))
        x = self.add_relu(y, x)
        x = self.cat([self.branch_a(x), self.dw_relu6(self.dw_bn(self.dw(x)))])
        x = self.flatten(self.gap(self.avg(x)))
        return self.dequant(self.fc(x))


def shapes_data(num, seed, size=16):
    images, labels = make_shapes(num, size=size, seed=seed)
    x = (images.astype(np.float32) / 255.0 - 0.5) / 0.25
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)), labels


def train(model, x, y, steps, lr=0.05, batch=32, seed=0):
    rng = np.random.default_rng(seed)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    model.train()
    for _ in range(steps):
        idx = rng.integers(0, len(x), batch)
        loss = F.cross_entropy(model(ty.tensor(x[idx])), ty.tensor(y[idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def predict(model, x, batch=200):
    model.eval()
    with ty.no_grad():
        return np.concatenate([model(ty.tensor(x[i:i + batch])).numpy()
                               for i in range(0, len(x), batch)])


def unmarked(args):
    """An int8 layer's inputs dequantized without their grids: the QAT twin then runs its
    float form (fake quantization in float32), as in training."""
    out = []
    for a in args:
        out.append(unmarked(a) if isinstance(a, (list, tuple)) else dequantize_tensor(a))
    return out


def record_int8_layers(int8, x, names=None):
    """{name: (args, out)} of every int8 layer (or those named) over one forward of x."""
    seen = {}
    handles = [m.register_forward_hook(lambda mod, args, out, name=name:
                                       seen.__setitem__(name, (args, out)))
               for name, m in int8.named_modules()
               if isinstance(m, QuantizedModule) and (names is None or name in names)]
    with ty.no_grad():
        int8(ty.tensor(x))
    for handle in handles:
        handle.remove()
    return seen


def assert_layers_equal_qat(seen, qat):
    """Each int8 layer's output equals, bit for bit, its QAT twin's in eval on the same
    inputs (dequantized, carrying their grids): the twin computes the int8 integers."""
    with ty.no_grad():
        for name, (args, out) in seen.items():
            ref = qat.get_submodule(name)(*float_inputs(args)).numpy()
            np.testing.assert_array_equal(dequantize_tensor(out).numpy(), ref, err_msg=name)


def float_inputs(args):
    """An int8 layer's inputs dequantized, carrying their qparams as QAT tensors do: what the
    QAT twin of the layer takes."""
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.append(float_inputs(a))
            continue
        t = dequantize_tensor(a)
        if t is not a:
            t.qparams = QParams(a.data.scale, a.data.zero_point, a.data.dtype, None)
        out.append(t)
    return out
