"""The GANs' speed, three parts (--parts):

- int8: the DCGAN generator's inference, float32 against int8: every transposed conv of the
  generator (dcgan_cnn32_cifar10, pytorch-gan-collections' CNN32) as one layer, our float
  F.conv_transpose2d (no grad) against our int8 kernel (framework/csrc/int8_deconv/, a
  `kernels.PreparedDeconv` made once, NCHW in and out), then the whole generator: float32
  (eval, no grad) against the int8 generator of quantize_qat + calibrate + quantize. Weights
  are the zoo's N(0, 0.02) initialisation with BN statistics of a trained scale.
- train: one DCGAN training iteration (a discriminator step on --batch real and --batch
  generated images, then a generator step; non-saturating BCE, Adam 2e-4 betas (0.5, 0.999))
  in images/s: ours is trainers/gan.py's `GANTask.run_step` with the Trainer's `optimize`
  (--models: dcgan_cnn32_cifar10, dcgan_cifar10), PyTorch eager pytorch-gan-collections' loop
  on the same CNN32 layers with our initial weights loaded by name (gan_peers.py; the ResNet
  dcgan_cifar10 has no PyTorch twin here: "-").
- fid: Inception feature extraction in images/s: evaluation/gan.py's `batch_features` on our
  pytorch-fid Inception (zoo FIDInception, eval, no grad) against pytorch-fid's
  `InceptionV3([3])`, both with the same random weights (He-scaled convolutions, as
  tests/evaluation/test_eval_gan.py; pytorch-fid's weight download replaced by our state
  dict), on the same --fid-batch random images of --fid-size pixels, resized to 299 inside.

Times are the median of --repeat runs after a warm-up, ours and PyTorch's (a child process,
blas_env.in_child) alternating --rounds times so that a slow spell of the shared machine
hits both; each figure is the median over the rounds. Without torch the PyTorch columns
are "-".

    python bench/bench_gan.py [--parts int8,train,fid] [--batch 64] [--threads 2]
                              [--repeat 10] [--rounds 3] [--json out.json]
"""
import argparse
import json

import numpy as np

import gan_peers
from blas_env import in_child, restart_with_blas_threads
from int8_peers import median_ms
import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn, optim, zoo
from tianyuan import quantization as Q
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R
from tianyuan.trainers.engine import Trainer
from tianyuan.trainers.gan import GANTask
from tianyuan.evaluation.gan import batch_features


def generator(rng):
    """The DCGAN generator in eval mode, weights N(0, 0.02), BN statistics not the identity."""
    g = zoo.get_model("dcgan_cnn32_cifar10").generator
    for m in g.modules():
        if isinstance(m, nn.ConvTranspose2d):
            m.weight.data[:] = rng.normal(0, 0.02, m.weight.shape)
        if isinstance(m, nn.BatchNorm2d):
            c = m.running_mean.shape[0]
            m.running_mean.data[:] = rng.normal(0, 0.05, c)
            m.running_var.data[:] = rng.uniform(0.5, 2.0, c) * 0.02
    return g.eval()


def layer_inputs(g, z):
    """[(ConvTranspose2d, its float input (N, C, H, W))] from one hooked run."""
    seen = []
    hooks = [m.register_forward_hook(lambda mod, a, o: seen.append((mod, a[0].numpy())))
             for m in g.modules() if isinstance(m, nn.ConvTranspose2d)]
    with ty.no_grad():
        g(ty.tensor(z))
    for h in hooks:
        h.remove()
    return seen


def layer_pair(conv, x, rng):
    """(float fn, int8 fn) for one transposed conv on input x."""
    w, xt = ty.tensor(conv.weight.data), ty.tensor(x)

    def fp32():
        with ty.no_grad():
            F.conv_transpose2d(xt, w, None, conv.stride, conv.padding, conv.output_padding,
                               conv.groups, conv.dilation)
    scale = np.abs(x).max() / 127 + 1e-8
    xq = R.quantize(x, scale, 128, np.uint8)
    wq = rng.integers(-127, 128, conv.weight.shape).astype(np.int8)
    oc = conv.out_channels
    m, s = R.quantize_multiplier(np.full(oc, 1e-3))
    deconv = K.PreparedDeconv(K.pack_deconv_weights(wq, conv.groups), np.zeros(oc, np.int32),
                              m, s, 128, False, np.uint8, conv.stride, conv.padding,
                              conv.output_padding, conv.dilation)
    return fp32, lambda: deconv(xq, 128)


def timed(pairs, repeat, rounds):
    """Median over rounds of each (fp32, int8) pair's median time, the two alternating."""
    times = np.zeros((rounds, len(pairs), 2))
    for r in range(rounds):
        for i, pair in enumerate(pairs):
            for j, fn in enumerate(pair):
                times[r, i, j] = median_ms(fn, repeat)
    return np.median(times, axis=0)


def int8_part(args, rng):
    """Rows of the int8 part: each transposed conv, then the generator."""
    g = generator(rng)
    z = rng.standard_normal((args.batch, g.nz)).astype(np.float32)
    layers = layer_inputs(g, z)
    pairs = [layer_pair(conv, x, rng) for conv, x in layers]
    qat = Q.calibrate(Q.quantize_qat(g), [z[:16]])
    int8 = Q.quantize(qat)
    zt = ty.tensor(z)

    def run(model):
        def fn():
            with ty.no_grad():
                model(zt)
        return fn
    pairs.append((run(g), run(int8)))
    times = timed(pairs, args.repeat, args.rounds)
    print(f"DCGAN generator (dcgan_cnn32_cifar10), batch {args.batch}, {args.threads} threads, "
          f"ISA {ty.current_isa()}")
    print(f"{'layer':44s} {'fp32 ms':>9s} {'int8 ms':>9s} {'int8/fp32':>9s}")
    rows = []
    names = [f"{c.in_channels}->{c.out_channels} k{c.kernel_size[0]} s{c.stride[0]} "
             f"in {x.shape[2]}x{x.shape[3]}" for c, x in layers] + ["generator (images/s below)"]
    for name, (f, q) in zip(names, times):
        rows.append({"layer": name, "fp32_ms": f, "int8_ms": q})
        print(f"{name:44s} {f:9.3f} {q:9.3f} {q / f:9.2f}")
    f, q = times[-1]
    print(f"generator images/s: fp32 {1000 * args.batch / f:.0f}, int8 {1000 * args.batch / q:.0f}")
    return rows


class StepOnly:
    """What GANTask.run_step asks of a Trainer: `optimize` (the Trainer's own code) over
    {"discriminator", "generator"} optimizers, one process."""
    optimize, _optimizer = Trainer.optimize, Trainer._optimizer
    stop_requested, iter, epoch, out_dir = False, 0, 0, "-"

    def __init__(self, model, optimizers):
        self.model, self.optimizers = model, optimizers


def ours_train(model, batch, repeat):
    """Images/s of GANTask("ns").run_step on `batch` random real images."""
    model.train()
    opts = {part: optim.Adam(getattr(model, part).parameters(), 2e-4, betas=(0.5, 0.999))
            for part in ("discriminator", "generator")}
    trainer, task = StepOnly(model, opts), GANTask(loss="ns")
    real = np.random.default_rng(0).uniform(-1, 1, (batch, 3, 32, 32)).astype(np.float32)
    return 1000 * batch / median_ms(lambda: task.run_step(trainer, {"image": real}), repeat)


def train_part(args):
    """Rows of the training part: per model our images/s and PyTorch's (CNN32 only)."""
    rows = []
    for name in args.models.split(","):
        ours, peer = [], []
        for _ in range(args.rounds):
            ty.manual_seed(0)
            model = zoo.get_model(name)
            state = {k: v.copy() for k, v in model.state_dict().items()}
            ours.append(ours_train(model, args.batch, args.repeat))
            if name == "dcgan_cnn32_cifar10":
                peer.append(in_child(gan_peers.dcgan_train, state, args.batch, args.repeat,
                                     args.threads))
        rows.append(ratio_row(f"{name} training iteration", ours, peer))
    return rows


def fid_part(args):
    """The row of Inception feature extraction: ours and pytorch-fid's images/s."""
    ty.manual_seed(1)
    model = zoo.FIDInception().eval()
    for key, p in model.named_parameters():     # He-scaled convolutions: features near 1
        if key.endswith("conv.weight"):
            p.data *= np.sqrt(2.0 / p.data[0].size) / 0.1
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (args.fid_batch, 3, args.fid_size, args.fid_size))
    images = images.astype(np.float32)

    def run():
        with ty.no_grad():
            batch_features(model, images)
    ours, peer = [], []
    for _ in range(args.rounds):
        ours.append(1000 * len(images) / median_ms(run, args.repeat))
        peer.append(in_child(gan_peers.fid_features, state, images, args.repeat, args.threads))
    return [ratio_row(f"FID Inception features, {args.fid_size}px -> 299", ours, peer)]


def ratio_row(what, ours, peer):
    peer = [p for p in peer if p is not None]
    mine, theirs = float(np.median(ours)), float(np.median(peer)) if peer else None
    row = {"what": what, "images_s": round(mine, 1),
           "torch_images_s": round(theirs, 1) if theirs else "-",
           "ours_over_torch": round(mine / theirs, 2) if theirs else "-"}
    print(f"{what:48s} ours {mine:8.1f} images/s, PyTorch {row['torch_images_s']}, "
          f"ours/PyTorch {row['ours_over_torch']}", flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="int8,train,fid")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="dcgan_cnn32_cifar10",
                        help="the train part's GANs (dcgan_cnn32_cifar10,dcgan_cifar10)")
    parser.add_argument("--fid-batch", type=int, default=50)
    parser.add_argument("--fid-size", type=int, default=32)
    parser.add_argument("--json")
    args = parser.parse_args()
    restart_with_blas_threads(args.threads)
    ty.set_num_threads(args.threads)
    parts = args.parts.split(",")
    out = {"batch": args.batch, "threads": args.threads, "isa": ty.current_isa()}
    if "int8" in parts:
        out["rows"] = int8_part(args, np.random.default_rng(0))
    if "train" in parts:
        out["train"] = train_part(args)
    if "fid" in parts:
        out["fid"] = fid_part(args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
