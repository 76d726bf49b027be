"""numpy's OpenBLAS reads its settings once, when numpy is first imported: a benchmark that
wants them restarts itself with them in the environment before doing anything else."""
import os
import sys


def restart_with_blas_threads(threads):
    """Re-exec this script unless OpenBLAS runs `threads` threads whose workers sleep at once
    after each call (OPENBLAS_THREAD_TIMEOUT=4, as `import tianyuan` sets when it comes
    first): spinning workers would take a core from our OpenMP kernels."""
    wanted = {"OPENBLAS_NUM_THREADS": str(threads), "OPENBLAS_THREAD_TIMEOUT": "4"}
    if all(os.environ.get(k) == v for k, v in wanted.items()):
        return
    os.environ.update(wanted)
    os.execv(sys.executable, [sys.executable] + sys.argv)


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
