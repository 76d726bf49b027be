"""numpy's OpenBLAS reads its settings once, when numpy is first imported: a benchmark that
wants them restarts itself with them in the environment before doing anything else. Peers
run in a child process with the environment as it was before `import tianyuan` set its
OpenMP and OpenBLAS policies (`in_child`)."""
import contextlib
import os
import sys


def restart_with_blas_threads(threads):
    """Re-exec this script unless OpenBLAS runs `threads` threads whose workers sleep at once
    after each call (OPENBLAS_THREAD_TIMEOUT=4, as `import tianyuan` sets): spinning workers
    would take a core from our OpenMP kernels."""
    wanted = {"OPENBLAS_NUM_THREADS": str(threads), "OPENBLAS_THREAD_TIMEOUT": "4"}
    if all(os.environ.get(k) == v for k, v in wanted.items()):
        return
    # what an earlier `import tianyuan` set stays its own (re-set, and known, after the exec)
    ours = getattr(sys.modules.get("tianyuan"), "ENV_DEFAULTS", {})
    env = {k: v for k, v in os.environ.items() if k not in ours}
    env.update(wanted)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def openblas_core():
    """The kernel set numpy's OpenBLAS picked for this CPU (e.g. SkylakeX: AVX-512; Haswell:
    AVX2; OPENBLAS_CORETYPE overrides it), or "unknown" where numpy uses another BLAS."""
    import ctypes
    import glob

    import numpy as np
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs",
                                  "*openblas*"))
    for path in libs:
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_corename64_", "openblas_get_corename64_",
                     "openblas_get_corename"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return "unknown"


@contextlib.contextmanager
def without_our_env():
    """Inside: the environment lacks what `import tianyuan` set (tianyuan.ENV_DEFAULTS), so a
    peer started or imported here (a child process, PyTorch's own OpenMP runtime) runs with
    its defaults, not with our OpenMP spin count."""
    ours = getattr(sys.modules.get("tianyuan"), "ENV_DEFAULTS", {})
    saved = {name: os.environ.pop(name) for name in ours if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def in_child(fn, *args):
    """fn(*args) in a fresh spawned process, `without_our_env`."""
    import multiprocessing
    with without_our_env(), multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)
