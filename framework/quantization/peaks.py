"""The machine's int8 peaks in operations per second (2 per multiply-add), for bench_int8's
TOP/s: the median of `repeat` runs of a register-only loop of one kernel path's instruction
(`steps` iterations) on every kernel thread, after one run that wakes the threads and the
cores' 512-bit units (a first run reads low). RuntimeError where the CPU or its OS
lacks the path.
"""
import numpy as np

from .. import _C


def _peak(name, native, steps, repeat):
    if steps < 1 or repeat < 1:
        raise ValueError(f"{name}: steps and repeat must be >= 1, got {steps}, {repeat}")
    native(int(steps))
    return float(np.median([native(int(steps)) for _ in range(repeat)]))


def vnni_peak(steps=10_000_000, repeat=5):
    """AVX512-VNNI: vpdpbusd on zmm (`steps` x 12 instructions)."""
    return _peak("vnni_peak", _C.testing.int8_vnni_peak, steps, repeat)


def avx2_peak(steps=10_000_000, repeat=5):
    """The exact AVX2 form: vpmaddwd (16 multiply-adds on int16) and vpaddd pairs, the AVX2
    convolution tile's inner step less the activations' split."""
    return _peak("avx2_peak", _C.testing.int8_avx2_peak, steps, repeat)


def avxvnni_peak(steps=10_000_000, repeat=5):
    """AVX-VNNI: the VEX-encoded vpdpbusd on ymm (32 multiply-adds each), the AVX-VNNI
    convolution tile's instruction."""
    return _peak("avxvnni_peak", _C.testing.int8_avxvnni_peak, steps, repeat)


def amx_peak(steps=200_000, repeat=5):
    """AMX: TDPBUSD (`steps` x 4 instructions, 16 x 16 x 64 multiply-adds each); RuntimeError
    where the OS grants no AMX tiles."""
    return _peak("amx_peak", _C.testing.int8_amx_peak, steps, repeat)
