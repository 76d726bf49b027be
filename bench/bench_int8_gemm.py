"""Achieved GOP/s of the int8 GEMM (u8 x s8 -> s32, and -> requantized u8) per ISA path at
ResNet-like shapes, against the float32 numpy matmul (BLAS) at the same shapes.

GOP/s = 2*M*N*K / time; best of --repeat runs; weights packed once, outside the timing.
'+rq' times a `kernels.PreparedLinear` as the int8 Linear keeps it. On the `amx` path the
s32 GEMM is the VNNI kernel's, and the requantized one runs on AMX tiles where it takes them
(K a multiple of 64, N of 32, M and M*N*K past its thresholds). The last lines set the best VNNI figure against the
machine's VNNI peak and the best amx+rq one against its AMX peak, each measured before and
after the shapes (`kernels.vnni_peak`, `kernels.amx_peak`: register-only loops; the larger).

    python bench/bench_int8_gemm.py [--repeat 5] [--threads 2]
"""
import argparse
import time

import numpy as np

import tianyuan as ty
from tianyuan import _C
from tianyuan.quantization import kernels as K
from tianyuan.quantization import reference as R

# (name, M = output pixels, N = output channels, K = C * kh * kw) — ResNet-18/50 at 224, batch 1
SHAPES = [
    ("r18 layer1 3x3", 3136, 64, 576),
    ("r18 layer2 3x3", 784, 128, 1152),
    ("r18 layer3 3x3", 196, 256, 2304),
    ("r18 layer4 3x3", 49, 512, 4608),
    ("r50 1x1 expand", 3136, 256, 64),
    ("fc batch 16", 16, 1000, 512),
]


def best_time(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_shape(m, n, k, repeat, isas):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    packed = K.pack_weights(w)
    mult, shift = R.quantize_multiplier(np.full(n, 1e-4))
    bias = np.zeros(n, np.int32)
    ops = 2.0 * m * n * k / 1e9
    row = {}
    for isa in isas:
        ty.set_isa(isa)
        row[isa] = ops / best_time(lambda: K.gemm(a, 3, packed), repeat)
        prepared = K.PreparedLinear(packed, bias, mult, shift, 0, True, np.uint8)  # as kept
        row[isa + "+rq"] = ops / best_time(lambda: prepared(a, 3), repeat)
    af, wf = a.astype(np.float32), w.astype(np.float32).T.copy()
    row["f32 numpy"] = ops / best_time(lambda: af @ wf, repeat)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    ty.set_num_threads(args.threads)
    original, isas = ty.current_isa(), ty.available_isas()
    # the same threads, before numpy's BLAS (its spinning workers would share the cores)
    peak = K.vnni_peak() / 1e9 if "vnni" in isas else None
    amx_peak = K.amx_peak() / 1e9 if "amx" in isas and _C.cpu_features()["os_amx"] else None
    rows = []
    try:
        for name, m, n, k in SHAPES:
            rows.append((name, m, n, k, bench_shape(m, n, k, args.repeat, isas)))
    finally:
        ty.set_isa(original)
    cols = list(rows[0][4])
    print(f"GOP/s, {args.threads} threads ('+rq' = with requantization to u8)")
    print(f"{'shape':<16}{'M':>6}{'N':>6}{'K':>6}" + "".join(f"{c:>11}" for c in cols))
    for name, m, n, k, row in rows:
        print(f"{name:<16}{m:>6}{n:>6}{k:>6}" + "".join(f"{row[c]:>11.1f}" for c in cols))
    if peak is not None:  # and after: the larger of the two, as a slow spell lowers either
        peak = max(peak, K.vnni_peak() / 1e9)
        best = max(row[c] for *_, row in rows for c in row if c.startswith("vnni"))
        print(f"VNNI peak {peak:.0f} GOP/s (register-only vpdpbusd loop); the best vnni "
              f"figure above is {100 * best / peak:.0f} % of it")
    if amx_peak is not None:
        amx_peak = max(amx_peak, K.amx_peak() / 1e9)
        best = max(row["amx+rq"] for *_, row in rows)
        print(f"AMX peak {amx_peak:.0f} GOP/s (register-only TDPBUSD loop); the best amx+rq "
              f"figure above (AMX tiles) is {100 * best / amx_peak:.0f} % of it")


if __name__ == "__main__":
    main()
