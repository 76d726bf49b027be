"""Megvii's networks, re-written in tianyuan ops from their public source, as test oracles.

They follow MegEngine Models' official/vision/classification/{resnet,shufflenet}/model.py
and megvii-model/ShuffleNet-Series ShuffleNetV1/{blocks,network}.py (see
weights/README.md for the commits): their names, their channel_shuffle, their layouts.
MegEngine-layout states store grouped conv weights as (G, O/G, I/G, kh, kw), BN running
statistics as (1, C, 1, 1) and BN weight/bias as (C,) (megengine/module/{conv,batchnorm}.py).
The forwards average globally where theirs use AvgPool2d(7) (the same at 224x224), so
small inputs work.
"""
from collections import OrderedDict

import numpy as np

import tianyuan as ty
from tianyuan import functional as F

# model_size -> stage_out_channels[1:] (stem, stage 2-4, conv_last), their table
V2_WIDTHS = {"0.5x": [24, 48, 96, 192, 1024], "1.0x": [24, 116, 232, 464, 1024]}
V1_WIDTHS = {(3, "0.5x"): [12, 120, 240, 480], (8, "0.5x"): [16, 192, 384, 768],
             (3, "1.0x"): [24, 240, 480, 960]}


class StateMaker:
    """Random arrays under Megvii's names; megengine=True uses MegEngine's layouts."""

    def __init__(self, seed, megengine):
        self.rng, self.megengine, self.state = np.random.default_rng(seed), megengine, \
            OrderedDict()

    def conv(self, name, out_ch, in_ch, k, groups=1):
        fan_in = in_ch // groups * k * k
        w = self.rng.standard_normal((out_ch, in_ch // groups, k, k)) * np.sqrt(2.0 / fan_in)
        if self.megengine and groups > 1:
            w = w.reshape(groups, out_ch // groups, in_ch // groups, k, k)
        self.state[f"{name}.weight"] = w.astype(np.float32)

    def bn(self, name, ch):
        stat_shape = (1, ch, 1, 1) if self.megengine else (ch,)
        self.state[f"{name}.weight"] = self.rng.uniform(0.5, 1.5, ch).astype(np.float32)
        self.state[f"{name}.bias"] = (self.rng.standard_normal(ch) * 0.1).astype(np.float32)
        self.state[f"{name}.running_mean"] = (self.rng.standard_normal(stat_shape)
                                              * 0.1).astype(np.float32)
        self.state[f"{name}.running_var"] = self.rng.uniform(0.5, 1.5, stat_shape).astype(
            np.float32)
        if not self.megengine:
            self.state[f"{name}.num_batches_tracked"] = np.asarray(7, np.int64)

    def linear(self, name, out_f, in_f, bias):
        self.state[f"{name}.weight"] = (self.rng.standard_normal((out_f, in_f))
                                        / np.sqrt(in_f)).astype(np.float32)
        if bias:
            self.state[f"{name}.bias"] = (self.rng.standard_normal(out_f) * 0.1).astype(
                np.float32)


class Runner:
    """Their modules as functions over a state dict."""

    def __init__(self, state):
        self.s = state

    def conv(self, x, name, stride=1, pad=0, groups=1):
        w = self.s[f"{name}.weight"]
        w = w.reshape((-1,) + w.shape[2:]) if w.ndim == 5 else w   # MegEngine's grouped
        return F.conv2d(x, ty.tensor(w), None, stride, pad, 1, groups)

    def bn(self, x, name):
        get = lambda f: ty.tensor(self.s[f"{name}.{f}"].reshape(-1))  # noqa: E731
        return F.batch_norm(x, get("running_mean"), get("running_var"), get("weight"),
                            get("bias"), training=False, eps=1e-5)

    def head(self, x, name, bias):
        x = F.mean(x, axis=(2, 3))   # their AvgPool2d(7) + flatten at 224x224
        b = ty.tensor(self.s[f"{name}.bias"]) if bias else None
        return F.linear(x, ty.tensor(self.s[f"{name}.weight"]), b)


# ---- ShuffleNetV2 (MegEngine Models shufflenet/model.py) ---------------------------


def v2_state(model_size, num_classes=10, seed=0):
    stem, *stages, last = V2_WIDTHS[model_size]
    mk, inp = StateMaker(seed, megengine=True), stem
    mk.conv("first_conv.0", stem, 3, 3)
    mk.bn("first_conv.1", stem)
    unit = 0
    for n, oup in zip([4, 8, 4], stages):
        for i in range(n):
            pre, mid = f"features.{unit}", oup // 2
            block_in = inp if i == 0 else inp // 2
            outputs = oup - block_in
            mk.conv(f"{pre}.branch_main.0", mid, block_in, 1)
            mk.bn(f"{pre}.branch_main.1", mid)
            mk.conv(f"{pre}.branch_main.3", mid, mid, 3, groups=mid)
            mk.bn(f"{pre}.branch_main.4", mid)
            mk.conv(f"{pre}.branch_main.5", outputs, mid, 1)
            mk.bn(f"{pre}.branch_main.6", outputs)
            if i == 0:
                mk.conv(f"{pre}.branch_proj.0", inp, inp, 3, groups=inp)
                mk.bn(f"{pre}.branch_proj.1", inp)
                mk.conv(f"{pre}.branch_proj.2", inp, inp, 1)
                mk.bn(f"{pre}.branch_proj.3", inp)
            inp, unit = oup, unit + 1
    mk.conv("conv_last.0", last, inp, 1)
    mk.bn("conv_last.1", last)
    mk.linear("classifier.0", num_classes, last, bias=False)
    return mk.state


def _v2_channel_shuffle(x):
    """Theirs: (N*C/2, 2, HW) -> (2, N*C/2, HW) -> two (N, C/2, H, W): even, odd channels."""
    n, c, h, w = x.shape
    y = F.permute(F.reshape(x, (n * c // 2, 2, h * w)), (1, 0, 2))
    y = F.reshape(y, (2, n, c // 2, h, w))
    return y[0], y[1]


def _v2_unit(r, x, pre, stride):
    def main(z):
        z = F.relu(r.bn(r.conv(z, f"{pre}.branch_main.0"), f"{pre}.branch_main.1"))
        mid = z.shape[1]
        z = r.bn(r.conv(z, f"{pre}.branch_main.3", stride, 1, mid), f"{pre}.branch_main.4")
        return F.relu(r.bn(r.conv(z, f"{pre}.branch_main.5"), f"{pre}.branch_main.6"))
    if stride == 1:
        x_proj, z = _v2_channel_shuffle(x)
        return F.concat([x_proj, main(z)], axis=1)
    p = r.bn(r.conv(x, f"{pre}.branch_proj.0", 2, 1, x.shape[1]), f"{pre}.branch_proj.1")
    p = F.relu(r.bn(r.conv(p, f"{pre}.branch_proj.2"), f"{pre}.branch_proj.3"))
    return F.concat([p, main(x)], axis=1)


def v2_forward(state, x):
    r = Runner(state)
    x = F.relu(r.bn(r.conv(x, "first_conv.0", 2, 1), "first_conv.1"))
    x = F.max_pool2d(x, 3, 2, 1)
    unit = 0
    for n in [4, 8, 4]:
        for i in range(n):
            x = _v2_unit(r, x, f"features.{unit}", 2 if i == 0 else 1)
            unit += 1
    x = F.relu(r.bn(r.conv(x, "conv_last.0"), "conv_last.1"))
    return r.head(x, "classifier.0", bias=False)


# ---- ShuffleNetV1 (megvii-model/ShuffleNet-Series, PyTorch layout) ------------------


def v1_state(group, model_size, num_classes=10, seed=0):
    stem, *stages = V1_WIDTHS[(group, model_size)]
    mk, inp = StateMaker(seed, megengine=False), stem
    mk.conv("first_conv.0", stem, 3, 3)
    mk.bn("first_conv.1", stem)
    unit = 0
    for n, oup in zip([4, 8, 4], stages):
        for i in range(n):
            pre, mid = f"features.{unit}", oup // 4
            outputs = oup - inp if i == 0 else oup
            mk.conv(f"{pre}.branch_main_1.0", mid, inp, 1, groups=1 if unit == 0 else group)
            mk.bn(f"{pre}.branch_main_1.1", mid)
            mk.conv(f"{pre}.branch_main_1.3", mid, mid, 3, groups=mid)
            mk.bn(f"{pre}.branch_main_1.4", mid)
            mk.conv(f"{pre}.branch_main_2.0", outputs, mid, 1, groups=group)
            mk.bn(f"{pre}.branch_main_2.1", outputs)
            inp, unit = oup, unit + 1
    mk.linear("classifier.0", num_classes, inp, bias=False)
    return mk.state


def _v1_channel_shuffle(x, group):
    """Theirs: view (N, C/g, g, H, W), swap axes 1 and 2, flatten."""
    n, c, h, w = x.shape
    y = F.permute(F.reshape(x, (n, c // group, group, h, w)), (0, 2, 1, 3, 4))
    return F.reshape(y, (n, c, h, w))


def _v1_unit(r, x, pre, group, stride, first_group):
    z = r.conv(x, f"{pre}.branch_main_1.0", 1, 0, 1 if first_group else group)
    z = F.relu(r.bn(z, f"{pre}.branch_main_1.1"))
    z = r.bn(r.conv(z, f"{pre}.branch_main_1.3", stride, 1, z.shape[1]),
             f"{pre}.branch_main_1.4")
    if group > 1:
        z = _v1_channel_shuffle(z, group)
    z = r.bn(r.conv(z, f"{pre}.branch_main_2.0", 1, 0, group), f"{pre}.branch_main_2.1")
    if stride == 1:
        return F.relu(z + x)
    return F.concat([F.avg_pool2d(x, 3, 2, 1), F.relu(z)], axis=1)


def v1_forward(state, x, group):
    r = Runner(state)
    x = F.relu(r.bn(r.conv(x, "first_conv.0", 2, 1), "first_conv.1"))
    x = F.max_pool2d(x, 3, 2, 1)
    unit = 0
    for n in [4, 8, 4]:
        for i in range(n):
            x = _v1_unit(r, x, f"features.{unit}", group, 2 if i == 0 else 1, unit == 0)
            unit += 1
    return r.head(x, "classifier.0", bias=False)


# ---- ResNet-18 (MegEngine Models resnet/model.py) -----------------------------------


def resnet18_state(num_classes=10, seed=0):
    mk, inp = StateMaker(seed, megengine=True), 64
    mk.conv("conv1", 64, 3, 7)
    mk.bn("bn1", 64)
    for stage, width in enumerate([64, 128, 256, 512], start=1):
        for i in range(2):
            pre = f"layer{stage}.{i}"
            mk.conv(f"{pre}.conv1", width, inp, 3)
            mk.bn(f"{pre}.bn1", width)
            mk.conv(f"{pre}.conv2", width, width, 3)
            mk.bn(f"{pre}.bn2", width)
            if inp != width or (i == 0 and stage > 1):
                mk.conv(f"{pre}.downsample.0", width, inp, 1)
                mk.bn(f"{pre}.downsample.1", width)
            inp = width
    mk.linear("fc", num_classes, 512, bias=True)
    return mk.state


def resnet18_forward(state, x):
    r = Runner(state)
    x = F.max_pool2d(F.relu(r.bn(r.conv(x, "conv1", 2, 3), "bn1")), 3, 2, 1)
    for stage in range(1, 5):
        for i in range(2):
            pre, stride = f"layer{stage}.{i}", 2 if (i == 0 and stage > 1) else 1
            z = F.relu(r.bn(r.conv(x, f"{pre}.conv1", stride, 1), f"{pre}.bn1"))
            z = r.bn(r.conv(z, f"{pre}.conv2", 1, 1), f"{pre}.bn2")
            if f"{pre}.downsample.0.weight" in state:
                x = r.bn(r.conv(x, f"{pre}.downsample.0", stride), f"{pre}.downsample.1")
            x = F.relu(z + x)
    return r.head(x, "fc", bias=True)
