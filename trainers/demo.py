"""`make demo`: train a small conv net on generated coloured shapes, then run it as int8.

Ten classes of shapes, 32x32 RGB, a few thousand images made on the fly (no download).
After float training: post-training calibration (PTQ) and a short quantization-aware
fine-tune (QAT), each converted to int8; a table compares accuracy, latency and size.
Results are printed and written to demo_out/demo.json.

    python -m tianyuan.trainers.demo [--epochs 6] [--train 4000] [--test 1000]
"""
import argparse
import json
import os
import time

import numpy as np
from tqdm import tqdm

import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn, optim
from tianyuan.datasets.synthetic import make_shapes
from tianyuan.trainers import demo_quant

MEAN = np.array([0.5, 0.5, 0.5], np.float32)
STD = np.array([0.25, 0.25, 0.25], np.float32)


def conv_bn_relu(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU())


class ShapesNet(nn.Module):
    """Three conv-BN-ReLU stages, global pooling, a linear classifier (~25k parameters).
    QAT-ready: stubs at the ends, and `fuse_groups` names each conv-BN-ReLU."""

    def __init__(self, num_classes=10, width=16):
        super().__init__()
        self.quant, self.dequant = nn.QuantStub(), nn.DequantStub()
        self.features = nn.Sequential(
            conv_bn_relu(3, width), nn.MaxPool2d(2),            # (N, w, 16, 16)
            conv_bn_relu(width, 2 * width), nn.MaxPool2d(2),    # (N, 2w, 8, 8)
            conv_bn_relu(2 * width, 4 * width),                 # (N, 4w, 8, 8)
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        return self.dequant(self.fc(self.features(self.quant(x))))

    def fuse_groups(self):
        return [[f"features.{i}.{j}" for j in range(3)] for i in (0, 2, 4)]


def to_input(images):
    """uint8 (N, H, W, 3) RGB -> normalised float32 (N, 3, H, W)."""
    x = (images.astype(np.float32) / 255.0 - MEAN) / STD
    return ty.tensor(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def augment(images, rng):
    """Random horizontal flips (every shape class is flip-invariant in its label)."""
    flip = rng.random(len(images)) < 0.5
    out = images.copy()
    out[flip] = out[flip, :, ::-1]
    return out


def evaluate(model, images, labels, batch_size=250):
    model.eval()
    correct = 0
    with ty.no_grad():
        for start in range(0, len(images), batch_size):
            logits = model(to_input(images[start:start + batch_size]))
            correct += int((logits.argmax(axis=1).numpy() == labels[start:start + batch_size]).sum())
    return correct / len(images)


def train(model, images, labels, epochs, batch_size, lr, seed):
    rng = np.random.default_rng(seed)
    steps = epochs * (len(images) // batch_size)
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    bar = tqdm(total=steps, desc="train", unit="it", dynamic_ncols=True)
    model.train()
    for epoch in range(epochs):
        order = rng.permutation(len(images))
        for start in range(0, len(order) - batch_size + 1, batch_size):
            batch = order[start:start + batch_size]
            loss = F.cross_entropy(model(to_input(augment(images[batch], rng))),
                                   ty.tensor(labels[batch]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            bar.set_postfix(epoch=epoch + 1, loss=f"{loss.item():.3f}",
                            lr=f"{scheduler.get_last_lr()[0]:.4f}")
            bar.update()
    bar.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--train", type=int, default=4000)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="demo_out")
    args = parser.parse_args(argv)

    ty.manual_seed(args.seed)
    started = time.time()
    train_images, train_labels = make_shapes(args.train, seed=args.seed)
    test_images, test_labels = make_shapes(args.test, seed=args.seed + 1)
    print(f"data: {args.train} train / {args.test} test images, 32x32, 10 shape classes")
    model = ShapesNet()
    print(f"model: ShapesNet, {sum(p.size for p in model.parameters())} parameters")
    train(model, train_images, train_labels, args.epochs, args.batch_size, args.lr, args.seed)
    accuracy = evaluate(model, test_images, test_labels)
    print(f"float test accuracy {100 * accuracy:.2f}%; post-training calibration (32 batches)")
    ptq_int8 = demo_quant.ptq(model, train_images, to_input)
    print("quantization-aware fine-tune (1 epoch, lr 0.005)")
    _, qat_int8 = demo_quant.qat_finetune(model, train_images, train_labels, train)
    models = {"float": model, "PTQ int8": ptq_int8, "QAT int8": qat_int8}
    rows = demo_quant.compare(models, lambda m: evaluate(m, test_images, test_labels),
                              test_images, to_input)
    seconds = time.time() - started
    result = {"model": "ShapesNet", "epochs": args.epochs, "train_images": args.train,
              "test_images": args.test, "test_accuracy": accuracy, "quantized": rows,
              "seconds": round(seconds, 1)}
    os.makedirs(args.out, exist_ok=True)
    ty.save(model.state_dict(), os.path.join(args.out, "shapesnet.safetensors"))
    with open(os.path.join(args.out, "demo.json"), "w") as f:
        json.dump(result, f, indent=2)
    demo_quant.print_table(rows)
    print(f"wall time {seconds:.1f}s")
    print(f"\nweights: {args.out}/shapesnet.safetensors   results: {args.out}/demo.json")
    return result


if __name__ == "__main__":
    main()
