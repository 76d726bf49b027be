"""`import tianyuan` has numpy's OpenBLAS put its workers to sleep right after each call
(OPENBLAS_THREAD_TIMEOUT=4), also where numpy was imported first."""
import os
import subprocess
import sys

import pytest

PROBE = r"""
import sys
if sys.argv[1] == "numpy-first":
    import numpy
import tianyuan, numpy, ctypes
paths = {l.split(None, 5)[5].strip() for l in open("/proc/self/maps")
         if "openblas" in l.lower() and len(l.split(None, 5)) == 6}
for path in sorted(paths):
    fn = getattr(ctypes.CDLL(path), "openblas_thread_timeout", None)
    if fn is not None:
        print(fn())
        break
else:
    print("no OpenBLAS")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
@pytest.mark.parametrize("order", ["tianyuan-first", "numpy-first"])
def test_openblas_reads_the_short_timeout_in_either_import_order(order):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    out = subprocess.run([sys.executable, "-c", PROBE, order], env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    if out == "no OpenBLAS":
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    assert out == "4", f"OpenBLAS's thread timeout after {order}: {out}"


def test_a_timeout_the_user_set_is_kept():
    env = dict(os.environ, OPENBLAS_THREAD_TIMEOUT="7")
    out = subprocess.run([sys.executable, "-c", PROBE, "numpy-first"], env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    if out == "no OpenBLAS":
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    assert out == "7"


def test_small_products_run_openblas_on_the_calling_thread():
    import numpy as np

    import tianyuan as ty
    from tianyuan.ops import blas

    setters = blas._find_setters()
    if not setters:
        pytest.skip("numpy's BLAS has no openblas_set_num_threads_local")
    set_local = setters[0]

    def threads():
        now = set_local(2)
        set_local(now)
        return now

    outside = threads()
    if outside < 2:
        pytest.skip("numpy's OpenBLAS runs one thread here")
    with blas.small_product(blas.SMALL_FLOPS):
        assert threads() == 1
    assert threads() == outside
    with pytest.raises(RuntimeError):
        with blas.small_product(1):
            raise RuntimeError("restored on the way out")
    assert threads() == outside
    with blas.small_product(blas.SMALL_FLOPS + 1):
        assert threads() == outside
    a = ty.tensor(np.ones((3, 4), np.float32), requires_grad=True)
    (a @ ty.tensor(np.ones((4, 5), np.float32))).sum().backward()   # the op's own uses
    np.testing.assert_array_equal(a.grad.numpy(), np.full((3, 4), 5.0))
    assert threads() == outside
