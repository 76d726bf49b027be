"""tianyuan: a deep-learning framework core for a model zoo, from training to int8.

>>> import tianyuan as ty
>>> x = ty.randn(2, 3, requires_grad=True)
>>> ty.functional.relu(x).sum().backward()
"""
__version__ = "0.1.0"

import os as _os

# The environment variables this import set (not the user's): process-wide policies that a
# benchmark's peer (PyTorch's own OpenMP) should run without.
ENV_DEFAULTS = {}


def _default_env(name, value):
    if name not in _os.environ:
        _os.environ[name] = ENV_DEFAULTS[name] = value


# OpenMP's idle policy is libgomp's default (this import sets nothing; a user's
# OMP_WAIT_POLICY or GOMP_SPINCOUNT applies): after a parallel region our workers spin
# 300,000 times (a few ms) before they sleep. Waking sleeping threads is slow on VMs in
# stretches, and a short spin made batch-1 networks pay it per layer. The price: a numpy GEMM
# that starts while our workers still spin shares a core with them, hence numpy's GEMM out of
# the hot paths (bench/RESULTS.md, threads, memory and the process: OpenMP's idle policy).
# The converse: after each call OpenBLAS's workers spin for 2**28 cycles (~0.1 s) by default,
# taking a core from our next OpenMP kernel (a conv right after a numpy GEMM ran at one
# core's speed on two). 2**4 cycles: they sleep at once. OpenBLAS reads it when numpy is
# first imported; where numpy came first, _openblas_read_timeout has it read again.
_default_env("OPENBLAS_THREAD_TIMEOUT", "4")


def _openblas_read_timeout():
    """numpy imported before tianyuan: its OpenBLAS read the environment without the timeout
    set above, and a fused fp32 model's fc woke OpenBLAS's workers, which then spun through the
    next forward's convolutions (bench/RESULTS.md, OpenBLAS's workers). Make
    the loaded OpenBLAS read its environment again (openblas_read_env) and stop its thread
    pool (blas_thread_shutdown_, as it does before a fork): the next BLAS call starts the pool
    anew with the short timeout. Linux only (the loaded libraries come from /proc/self/maps);
    a no-op where the user set the timeout, numpy is not loaded, or its BLAS is not OpenBLAS."""
    import sys

    if "OPENBLAS_THREAD_TIMEOUT" not in ENV_DEFAULTS or "numpy" not in sys.modules:
        return
    from .ops.blas import loaded_openblas

    for lib in loaded_openblas():
        try:
            read_env, stop_pool = lib.openblas_read_env, lib.blas_thread_shutdown_
        except AttributeError:
            continue
        read_env()
        stop_pool()


_openblas_read_timeout()


def _keep_freed_blocks():
    """glibc hands every block over 32 MB back to the kernel on free, so the next step's
    activation of that size page-faults again in full (ResNet-18's stem output at batch 16;
    bench/RESULTS.md, freed memory). Training and
    inference reallocate the same sizes every step, so keep blocks up to 1 GB in the heap
    and trim it past 1 GB free. Off with TIANYUAN_MALLOC_KEEP=0; a no-op off glibc."""
    if _os.environ.get("TIANYUAN_MALLOC_KEEP", "1") == "0":
        return
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 1 << 30)
    mallopt(m_trim_threshold, 1 << 30)


_keep_freed_blocks()

from . import _native  # noqa: E402
from ._native import available_isas, current_isa, get_num_threads, set_isa, set_num_threads
from .autograd import enable_grad, is_grad_enabled, no_grad
from .dtypes import bool_, float16, float32, float64, int8, int32, int64, uint8
from .random import get_rng_state, manual_seed, set_rng_state
from .tensor import (Tensor, arange, as_tensor, full, full_like, ones, ones_like, rand, rand_like,
                     randn, randn_like, tensor, zeros, zeros_like)
from . import functional
from .functional import concat, stack, where
from . import nn
from . import distributed, io, jit, optim, profiler, runtime
from .io import load, save
