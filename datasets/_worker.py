"""DataLoader internals: loading one batch, the worker process loop, shared-memory transport.

A batch goes back to the main process as a small tree in which every numpy array is replaced
by a reference (offset, shape, dtype) into one shared-memory segment per batch. The tree
travels through the worker's own pipe (Connection.send, written synchronously by the worker:
no feeder thread that a fork could leave holding a lock, so a result cannot be stranded in a
worker's buffer). The worker creates and fills the segment; the main process copies it out,
closes and unlinks it. Segment names are derived from the task's serial number, so the main
process can unlink the segments of tasks that never came back (dead worker, abandoned
epoch).

Signals. Ctrl-C reaches every process of the terminal's group: a worker ignores SIGINT (the
main process decides, and a trainer may finish its step with the workers' next batch), and
SIGTERM ends it, whatever handler it inherited through fork (a trainer's "stop after this
step" handler made terminate() a no-op). The worker also stops when the main process sets
its `stop` flag (a shared byte: no lock that a dead worker could leave held) or dies.
"""
import contextlib
import os
import pickle
import queue
import random
import signal
import sys
import traceback
from multiprocessing import shared_memory

import numpy as np

from .transforms.random import sample_rng

_ALIGN = 64
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_worker_info = None


class WorkerInfo:
    def __init__(self, worker_id, num_workers, seed, dataset):
        self.id, self.num_workers, self.seed, self.dataset = worker_id, num_workers, seed, dataset

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed})"


def get_worker_info():
    """In a DataLoader worker: its WorkerInfo (id, num_workers, seed, dataset); else None."""
    return _worker_info


class FetchError(Exception):
    """Wraps an exception raised while loading `index` (None: in collate)."""

    def __init__(self, index, original):
        super().__init__(index, original)
        self.index, self.original = index, original


def fetch_batch(dataset, indices, collate_fn, seed_key):
    """(collated batch or None, number of skipped items). Sample `pos` transforms draw from a
    generator seeded by seed_key + [pos], wherever it is loaded."""
    items = []
    for pos, index in enumerate(indices):
        try:
            with sample_rng(np.random.SeedSequence(list(seed_key) + [pos])):
                items.append(dataset[index])
        except Exception as error:
            raise FetchError(index, error) from error
    skipped = sum(item is None for item in items)
    try:
        batch = collate_fn(items) if len(items) > skipped else None
    except Exception as error:
        raise FetchError(None, error) from error
    return batch, skipped


class _Ref:
    __slots__ = ("offset", "shape", "dtype")

    def __init__(self, offset, shape, dtype):
        self.offset, self.shape, self.dtype = offset, shape, dtype


def _map_tree(tree, fn):
    if isinstance(tree, np.ndarray) and tree.dtype != object:
        return fn(tree)
    if isinstance(tree, dict):
        return {key: _map_tree(value, fn) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map_tree(value, fn) for value in tree)
    return tree


def segment_name(prefix, serial):
    return f"{prefix}_{serial}"


def pack(batch, name):
    """(tree with _Refs, segment size); the arrays are written into a new segment `name`."""
    arrays, size = [], 0

    def place(array):
        nonlocal size
        ref = _Ref(size, array.shape, array.dtype.str)
        arrays.append((ref, array))
        size += -(-array.nbytes // _ALIGN) * _ALIGN
        return ref

    tree = _map_tree(batch, place)
    if size == 0:
        return tree, 0
    segment = shared_memory.SharedMemory(name=name, create=True, size=size)
    try:
        for ref, array in arrays:
            view = np.ndarray(array.shape, array.dtype, buffer=segment.buf, offset=ref.offset)
            view[...] = array
            del view
    finally:
        segment.close()
    return tree, size


def unpack(tree, name, size):
    """Copy the segment out (one memcpy), unlink it, and rebuild the batch on that copy."""
    if size == 0:
        return tree
    segment = shared_memory.SharedMemory(name=name)
    try:
        shared = np.frombuffer(segment.buf, np.uint8, count=size)
        buffer = shared.copy()
        del shared
    finally:
        segment.close()
        segment.unlink()

    def restore(ref):
        dtype = np.dtype(ref.dtype)
        count = int(np.prod(ref.shape))
        return np.frombuffer(buffer, dtype, count=count, offset=ref.offset).reshape(ref.shape)

    return _restore_tree(tree, restore)


def _restore_tree(tree, fn):
    if isinstance(tree, _Ref):
        return fn(tree)
    if isinstance(tree, dict):
        return {key: _restore_tree(value, fn) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_restore_tree(value, fn) for value in tree)
    return tree


def unlink_quietly(name):
    try:
        segment = shared_memory.SharedMemory(name=name)
    except (FileNotFoundError, ValueError):
        return
    segment.close()
    segment.unlink()


def _error_message(serial, error):
    """The ("error", ...) message; the type falls back to RuntimeError if it won't pickle."""
    original = error.original if isinstance(error, FetchError) else error
    index = error.index if isinstance(error, FetchError) else None
    text = "".join(traceback.format_exception(type(original), original, original.__traceback__))
    kind = type(original)
    try:
        pickle.dumps(kind)
    except Exception:
        kind = RuntimeError
    return ("error", serial, index, kind, str(original), text)


def _run_task(dataset, task, collate_fn, prefix, results):
    """Load one batch and send its message (or the error's) through `results`."""
    serial, seed_key, indices = task
    try:
        batch, skipped = fetch_batch(dataset, indices, collate_fn, seed_key)
        tree, size = pack(batch, segment_name(prefix, serial))
        try:
            results.send(("ok", serial, tree, size, skipped))  # pickles before writing a byte
        except Exception:
            unlink_quietly(segment_name(prefix, serial))
            raise
    except Exception as error:
        results.send(_error_message(serial, error))


@contextlib.contextmanager
def opencv_pool_stopped():
    """Fork workers inside this block: OpenCV's thread pool is stopped while they start.

    Forked right after an OpenCV parallel call, a child inherits the pool's mutex held by a
    thread that does not exist there, and its cv2.setNumThreads waits forever (182 of 200
    forks hung here, OpenCV 4 pthreads backend). One thread stops the pool; the parent's
    count is restored afterwards and the pool restarts at its next parallel call."""
    cv2 = sys.modules.get("cv2")
    if cv2 is None:
        yield
        return
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(threads)


@contextlib.contextmanager
def signals_blocked():
    """Start workers inside this block: SIGINT and SIGTERM stay pending (blocked) in a new
    worker until it has set its own dispositions, so none reaches an inherited handler."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _own_signals():
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is the main process's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)    # terminate() ends the worker
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)


def worker_loop(dataset, index_queue, results, collate_fn, worker_id, num_workers, seed,
                worker_init_fn, prefix, stop):
    """Runs in the worker process until it receives None, `stop.value` is set, or its parent
    dies."""
    global _worker_info
    _own_signals()
    parent = os.getppid()
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    random.seed(seed)
    np.random.seed(seed % 2 ** 32)
    try:
        import cv2
        cv2.setNumThreads(1)   # one process per core already; OpenCV's pool would oversubscribe
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
    except Exception as error:
        results.send(_error_message(-1, error))
        return
    while not stop.value:
        try:
            task = index_queue.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:
                return
            continue
        if task is None:
            return
        _run_task(dataset, task, collate_fn, prefix, results)
