"""numpy's OpenBLAS on the calling thread alone for small products.

Our OpenMP workers spin for a few ms after each kernel (libgomp's default; see
tianyuan/__init__.py), so an OpenBLAS worker woken for a product right after one waits for a
core, and a small product's time varies many-fold from step to step (bench/RESULTS.md,
training: the classifier's products). `small_product(flops)` is a context in which numpy's
OpenBLAS runs on the calling thread (`openblas_set_num_threads_local`, a per-thread setting,
restored after) when the product takes at most SMALL_FLOPS floating-point operations (a few
ms on one core); larger ones keep every thread. A no-op where numpy's BLAS is not an OpenBLAS
with that call, or off Linux (the loaded libraries come from /proc/self/maps).
"""
import contextlib
import ctypes

SMALL_FLOPS = 1 << 28
_setters = None


def loaded_openblas():
    """ctypes handles of every OpenBLAS loaded in this process, from /proc/self/maps (Linux);
    [] where it cannot be read."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps
                     if "openblas" in line.lower() and len(line.split(None, 5)) == 6}
    except OSError:
        return []
    libs = []
    for path in sorted(paths):
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def _find_setters():
    """openblas_set_num_threads_local of every OpenBLAS loaded in this process."""
    found = []
    for lib in loaded_openblas():
        fn = getattr(lib, "openblas_set_num_threads_local", None)
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
            found.append(fn)
    return found


@contextlib.contextmanager
def small_product(flops):
    global _setters
    if flops > SMALL_FLOPS:
        yield
        return
    if _setters is None:
        _setters = _find_setters()
    before = [fn(1) for fn in _setters]
    try:
        yield
    finally:
        for fn, n in zip(_setters, before):
            fn(n)
