"""SimpleBaseline-R50 on person crops: inference of ours in float32 and int8 against a PyTorch
eager SimpleBaseline-R50 (torchvision's ResNet-50 + the three-deconv head, written here), and
a training step's images/s against PyTorch's (issue 53's targets: fp32 <= 0.9x PyTorch's
time, int8 <= 0.4x our fp32, training >= 1.0x PyTorch's images/s).

The same random weights in both (ours loaded from PyTorch's state dict through the
converter's names); BN statistics of a trained scale. int8: quantize_qat + calibrate on two
random batches + quantize. Each figure is the median over --rounds rounds of the median of
--repeat runs, the models alternating within a round. Without torch, the PyTorch columns are
left empty.

    python bench/bench_pose.py [--batch 32] [--size 256 192] [--threads 2] [--repeat 3]
                               [--rounds 3] [--train-batch 8] [--json out.json]
"""
import argparse
import json

import numpy as np

from blas_env import restart_with_blas_threads
from int8_peers import median_ms
import tianyuan as ty
import tianyuan.functional as F
from tianyuan import optim, zoo
from tianyuan import quantization as Q


def torch_model():
    """A PyTorch SimpleBaseline-R50 (Xiao et al.'s PoseResNet) or None without torch."""
    try:
        import torch
        import torchvision
    except ImportError:
        return None

    class PoseResNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            resnet = torchvision.models.resnet50(weights=None)
            for name in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3",
                         "layer4"):
                setattr(self, name, getattr(resnet, name))
            layers, width = [], 2048
            for _ in range(3):
                layers += [torch.nn.ConvTranspose2d(width, 256, 4, 2, 1, 0, bias=False),
                           torch.nn.BatchNorm2d(256), torch.nn.ReLU(inplace=True)]
                width = 256
            self.deconv_layers = torch.nn.Sequential(*layers)
            self.final_layer = torch.nn.Conv2d(256, 17, 1)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.final_layer(self.deconv_layers(x))

    torch.manual_seed(0)
    model = PoseResNet()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_var.uniform_(0.5, 1.5)
            elif isinstance(m, torch.nn.ConvTranspose2d):
                m.weight.normal_(0, 0.02)
    return model


def ours_from(theirs):
    model = zoo.get_model("simplebaseline_res50")
    if theirs is not None:
        model.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, nargs=2, default=[256, 192])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-batch", type=int, default=8)
    parser.add_argument("--json")
    args = parser.parse_args()
    restart_with_blas_threads(args.threads)
    ty.set_num_threads(args.threads)
    theirs = torch_model()
    if theirs is not None:
        import torch
        torch.set_num_threads(args.threads)
    ours = ours_from(theirs).eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 3, *args.size)).astype(np.float32)
    calib = [b for b in np.array_split(x[:8], 2) if len(b)]
    int8 = Q.quantize(Q.calibrate(Q.quantize_qat(ours), calib))
    xt = ty.tensor(x)

    def ty_run(model):
        def fn():
            with ty.no_grad():
                model(xt)
        return fn
    runs = {"ours fp32": ty_run(ours), "ours int8": ty_run(int8)}
    if theirs is not None:
        theirs.eval()
        xp = torch.from_numpy(x)

        def torch_run():
            with torch.no_grad():
                theirs(xp)
        runs["PyTorch fp32"] = torch_run
    infer = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            infer[name].append(median_ms(fn, args.repeat))
    infer = {name: float(np.median(t)) for name, t in infer.items()}

    # one training step (forward, MSE on heatmaps, backward, Adam) at --train-batch
    n = args.train_batch
    xs = x[:n]
    with ty.no_grad():
        heat = ours(ty.tensor(xs[:1])).shape[2:]      # 1/4 of the crop (sides /32 rounded up x8)
    target = rng.random((n, 17, *heat)).astype(np.float32)
    ours.train()
    opt = optim.Adam(ours.parameters(), lr=1e-3)

    def ty_step():
        loss = F.mse_loss(ours(ty.tensor(xs)), ty.tensor(target))
        opt.zero_grad()
        loss.backward()
        opt.step()
    steps = {"ours": ty_step}
    if theirs is not None:
        theirs.train()
        topt = torch.optim.Adam(theirs.parameters(), lr=1e-3)
        txs, tt = torch.from_numpy(xs), torch.from_numpy(target)

        def torch_step():
            loss = torch.nn.functional.mse_loss(theirs(txs), tt)
            topt.zero_grad()
            loss.backward()
            topt.step()
        steps["PyTorch"] = torch_step
    train = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, fn in steps.items():
            train[name].append(median_ms(fn, max(1, args.repeat // 2)))
    train = {name: 1000.0 * n / float(np.median(t)) for name, t in train.items()}

    peer = infer.get("PyTorch fp32")
    print(f"SimpleBaseline-R50, {args.batch} crops {args.size[0]}x{args.size[1]}, "
          f"{args.threads} threads, ISA {ty.current_isa()}")
    print(f"{'inference':16s} {'ms':>10s} {'vs PyTorch':>11s} {'vs our fp32':>12s}")
    for name, ms in infer.items():
        ratio = f"{ms / peer:11.2f}" if peer else f"{'-':>11s}"
        print(f"{name:16s} {ms:10.1f} {ratio} {ms / infer['ours fp32']:12.2f}")
    print(f"training step, batch {n}: images/s " + ", ".join(
        f"{k} {v:.2f}" for k, v in train.items()) + (
        f"; ours / PyTorch {train['ours'] / train['PyTorch']:.2f}" if "PyTorch" in train else ""))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"batch": args.batch, "size": args.size, "threads": args.threads,
                       "isa": ty.current_isa(), "inference_ms": infer,
                       "train_images_per_s": train}, fh, indent=1)


if __name__ == "__main__":
    main()
