"""The GAN generators' inference, float32 against int8: every transposed conv of the DCGAN
generator (dcgan_cnn32_cifar10, pytorch-gan-collections' CNN32) as one layer, our float
F.conv_transpose2d (no grad) against our int8 kernel (framework/csrc/int8_deconv/, a
`kernels.PreparedDeconv` made once, NCHW in and out), then the whole generator: float32
(eval, no grad) against the int8 generator of quantize_qat + calibrate + quantize.

Weights are the zoo's N(0, 0.02) initialisation with BN statistics of a trained scale; times
are the median of --repeat runs after a warm-up, both columns alternating --rounds times so
that a slow spell of the shared machine hits both; a layer's or the model's time is the
median over the rounds.

    python bench/bench_gan.py [--batch 64] [--threads 2] [--repeat 10] [--rounds 3]
                              [--json out.json]
"""
import argparse
import json

import numpy as np

from blas_env import restart_with_blas_threads
from int8_peers import median_ms
import tianyuan as ty
import tianyuan.functional as F
from tianyuan import nn, zoo
from tianyuan import quantization as Q
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    restart_with_blas_threads(args.threads)
    ty.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
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
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"batch": args.batch, "threads": args.threads, "isa": ty.current_isa(),
                       "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
