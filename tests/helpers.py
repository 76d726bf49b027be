"""One helper per concern, so a test is one line.

`check_op(fn, ref, shapes)`: forward against a numpy reference, then every input's
gradient against central finite differences in float64. `gradgradcheck(fn, arrays)`: the
gradients of the gradients (autograd.grad with create_graph) the same way.
"""
import numpy as np

import tianyuan as ty
from tianyuan import _C


def numeric_grad(fn, arrays, index, eps=1e-6):
    """d(sum(fn(*arrays) * weights))/d(arrays[index]) by central differences (float64)."""
    x = arrays[index]
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        plus = fn(*arrays)
        flat[i] = old - eps
        minus = fn(*arrays)
        flat[i] = old
        gflat[i] = (plus - minus) / (2 * eps)
    return grad


def gradcheck(fn, inputs, atol=1e-6, rtol=1e-4, seed=0):
    """Compare autograd gradients of `fn(*tensors)` with finite differences in float64.

    `inputs` are numpy arrays; float ones get gradients checked. The output is reduced
    with fixed random weights so every output element matters.
    """
    arrays = [np.array(a, dtype=np.float64) if np.issubdtype(np.asarray(a).dtype, np.floating)
              else np.asarray(a) for a in inputs]
    tensors = [ty.tensor(a, requires_grad=np.issubdtype(a.dtype, np.floating)) for a in arrays]
    out = fn(*tensors)
    weights = np.random.default_rng(seed).standard_normal(out.shape)
    (out * ty.tensor(weights)).sum().backward()

    def scalar(*arrs):
        with ty.no_grad():
            y = fn(*[ty.tensor(a) for a in arrs])
        return float((y.numpy() * weights).sum())

    for i, (a, t) in enumerate(zip(arrays, tensors)):
        if not t.requires_grad:
            continue
        expected = numeric_grad(scalar, arrays, i)
        assert t.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(t.grad.numpy(), expected, atol=atol, rtol=rtol,
                                   err_msg=f"gradient of input {i} (shape {a.shape})")


def gradgradcheck(fn, inputs, atol=1e-6, rtol=1e-4, seed=0):
    """Double backward of `fn(*tensors)` against finite differences in float64.

    The first gradients come from `autograd.grad(out, inputs, grad_outputs=u,
    create_graph=True)` (and must equal the numpy backward's); then the scalar
    S = sum_i <grad_i, v_i> (u, v_i fixed random) is differentiated by autograd with respect
    to every float input and to u, and by central differences of S computed the first-order
    way. `inputs` are numpy arrays; float ones are differentiated.
    """
    arrays = [np.array(a, dtype=np.float64) if np.issubdtype(np.asarray(a).dtype, np.floating)
              else np.asarray(a) for a in inputs]
    floats = [i for i, a in enumerate(arrays) if np.issubdtype(a.dtype, np.floating)]
    rng = np.random.default_rng(seed)
    with ty.no_grad():
        out_shape = fn(*[ty.tensor(a) for a in arrays]).shape
    u = rng.standard_normal(out_shape)
    vs = [rng.standard_normal(arrays[i].shape) for i in floats]

    def first_grads(arrs, create_graph):
        tensors = [ty.tensor(a, requires_grad=i in floats) for i, a in enumerate(arrs[:-1])]
        weights = ty.tensor(arrs[-1], requires_grad=create_graph)
        grads = ty.autograd.grad(fn(*tensors), [tensors[i] for i in floats], weights,
                                 create_graph=create_graph, allow_unused=True)
        return tensors, weights, grads

    def scalar(*arrs):
        _, _, grads = first_grads(arrs, False)
        return float(sum((g.numpy() * v).sum() for g, v in zip(grads, vs) if g is not None))

    everything = arrays + [u]
    tensors, weights, grads = first_grads(everything, True)
    _, _, plain = first_grads(everything, False)
    for i, g, p in zip(floats, grads, plain):
        assert (g is None) == (p is None), f"input {i}: used in one pass but not the other"
        if g is not None:
            np.testing.assert_allclose(g.numpy(), p.numpy(), atol=1e-9, rtol=1e-7,
                                       err_msg=f"create_graph gradient of input {i}")
    total = sum((g * ty.tensor(v)).sum() for g, v in zip(grads, vs) if g is not None)
    targets = [tensors[i] for i in floats] + [weights]
    if not getattr(total, "requires_grad", False):
        analytic = [None] * len(targets)
    else:
        analytic = ty.autograd.grad(total, targets, allow_unused=True)
    for k, (index, got) in enumerate(zip(floats + [len(arrays)], analytic)):
        expected = numeric_grad(scalar, everything, index)
        got = np.zeros_like(expected) if got is None else got.numpy()
        what = "grad_outputs" if index == len(arrays) else f"input {index}"
        np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol,
                                   err_msg=f"second derivative through {what} "
                                           f"(shape {everything[index].shape})")


def check_op(fn, ref, shapes, *, low=-2.0, high=2.0, seed=0, fwd_rtol=1e-5, fwd_atol=1e-6,
             grad=True, grad_atol=1e-6, grad_rtol=1e-4):
    """Forward in float32 against `ref` (numpy), then finite-difference gradients in float64.

    `fn` takes tensors, `ref` numpy arrays; `shapes` give the float inputs, drawn
    uniformly from [low, high). Bind any other argument with a lambda.
    """
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(low, high, s) for s in shapes]
    out = fn(*[ty.tensor(a.astype(np.float32)) for a in arrays])
    expected = ref(*[a.astype(np.float32) for a in arrays])
    np.testing.assert_allclose(out.numpy(), expected, rtol=fwd_rtol, atol=fwd_atol,
                               err_msg="forward differs from the numpy reference")
    if grad:
        gradcheck(fn, arrays, atol=grad_atol, rtol=grad_rtol, seed=seed)


def close(got, want, what):
    """got == want to 1e-4, relative and against want's largest magnitude (at least 1)."""
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, err_msg=what)


def each_isa():
    """Yields every ISA path this machine runs, switched on; restores the original after."""
    original = ty.current_isa()
    try:
        for isa in ty.available_isas():
            ty.set_isa(isa)
            yield isa
    finally:
        ty.set_isa(original)


def check_quant(native, ref, *args, what="", **kwargs):
    """`native(*args, **kwargs)` equals `ref(...)` bit for bit on every ISA path here, and
    wrote nothing past its scratch buffers; `what` (the case) leads each failure's message.

    Int8 kernels against their numpy twin in tianyuan.quantization.reference.
    """
    expected = ref(*args, **kwargs)
    for i, isa in enumerate(each_isa()):
        where = f"{what}: ISA path {isa}" if what else f"ISA path {isa}"
        # junk in the scratch buffers: else a kernel that skips bytes it should write reads
        # the previous ISA's, which are right
        _C.testing.int8_scribble_scratch((0x5A + 0x3B * i) % 256)
        got = native(*args, **kwargs)
        broken = _C.testing.int8_broken_scratch()
        assert not broken, f"{where}: a kernel wrote past its scratch buffer(s) {broken}"
        assert got.dtype == expected.dtype, f"{where}: dtype {got.dtype} != {expected.dtype}"
        assert got.shape == expected.shape, f"{where}: shape {got.shape} != {expected.shape}"
        np.testing.assert_array_equal(got, expected, err_msg=where)


def guarded_copy(data):
    """A copy of `data` whose last byte is the last of a page that is followed by an
    unreadable one: a kernel that reads past the array faults. (array, buffer to keep)"""
    import ctypes
    import mmap
    nbytes, page = data.nbytes, mmap.PAGESIZE
    span = -(-nbytes // page) * page
    buf = mmap.mmap(-1, span + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(base + span, page, 0) == 0, ctypes.get_errno()
    out = np.frombuffer(buf, data.dtype, count=data.size, offset=span - nbytes)
    out = out.reshape(data.shape)
    out[...] = data
    return out, buf


def mpi_run(n, args, timeout=180, ok=True):
    """`mpiexec -n n python *args` (skipped without mpi4py or mpiexec): the CompletedProcess;
    with `ok`, asserted to exit 0, naming its output where it did not."""
    import os
    import shutil
    import subprocess
    import sys

    import pytest
    pytest.importorskip("mpi4py")
    mpiexec = (shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or
               shutil.which("mpiexec"))
    if mpiexec is None:
        pytest.skip("no mpiexec (pip install 'tianyuan[dist]')")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMP_NUM_THREADS": "1"}
    run = subprocess.run([mpiexec, "-n", str(n), "--oversubscribe", sys.executable, *args],
                         env=env, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def bounded_run(args, timeout, poke=None):
    """`python *args` in a process group of its own; `poke(process)`, if given, runs once it
    started (say, to send it a signal). Returns (CompletedProcess, seconds). Past `timeout`
    seconds the whole group, workers included, is killed and the test fails with the output:
    a hang fails one test instead of stopping the suite."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pytest
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        if poke is not None:
            poke(process)
        out, err = process.communicate(timeout=max(0.1, started + timeout - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"still running after {timeout} s: python {' '.join(args)[:300]}\n"
                    f"stdout: {out[-2000:]}\nstderr: {err[-2000:]}")
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)   # anything the command left behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(args, process.returncode, out, err), \
        time.monotonic() - started


# -- FID tests (tests/evaluation/test_eval_gan*.py) -------------------------------------------

def fid_stats(n, d, seed, scale=1.0):
    """(mu, sigma) of n random d-dimensional features, correlated by a random mix."""
    import numpy as np

    from tianyuan.evaluation import gan
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((d, d)) * scale / np.sqrt(d)
    return gan.statistics(rng.standard_normal((n, d)) @ mix + rng.standard_normal(d))


def quiet_fid(fn, *args, **kwargs):
    """fn(*args, **kwargs) with FIDWarning (fewer images than dimensions) silenced."""
    import warnings

    from tianyuan.evaluation.image_files import FIDWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FIDWarning)
        return fn(*args, **kwargs)


class DiskFull:
    """A file handle whose write stores half the bytes, then fails as a full disk does (a
    stand-in for os.fdopen's result in tianyuan.save's tests)."""

    def __init__(self, handle):
        self.handle = handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()

    def write(self, data):
        import errno
        import os
        self.handle.write(data[:len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
