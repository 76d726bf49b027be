"""DataLoader internals: loading one batch, the worker process loop, shared-memory transport.

A batch goes back to the main process as a pickled tree in which every numpy array is
replaced by a reference (offset, shape, dtype) into one shared-memory segment per batch.
The worker creates and fills the segment; the main process copies it out, closes and
unlinks it. Segment names are derived from the task's serial number, so the main process
can unlink the segments of tasks that never came back (dead worker, abandoned epoch).
"""
import os
import pickle
import queue
import random
import traceback
from multiprocessing import shared_memory

import numpy as np

from .transforms.random import sample_rng

_ALIGN = 64
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
    """The pickled ("error", ...) message; falls back to RuntimeError if the type won't pickle."""
    original = error.original if isinstance(error, FetchError) else error
    index = error.index if isinstance(error, FetchError) else None
    text = "".join(traceback.format_exception(type(original), original, original.__traceback__))
    try:
        kind = pickle.loads(pickle.dumps(type(original)))
    except Exception:
        kind = RuntimeError
    return pickle.dumps(("error", serial, index, kind, str(original), text))


def _run_task(dataset, task, collate_fn, prefix):
    serial, seed_key, indices = task
    try:
        batch, skipped = fetch_batch(dataset, indices, collate_fn, seed_key)
        tree, size = pack(batch, segment_name(prefix, serial))
        try:
            return pickle.dumps(("ok", serial, tree, size, skipped))
        except Exception:
            unlink_quietly(segment_name(prefix, serial))
            raise
    except Exception as error:
        return _error_message(serial, error)


def worker_loop(dataset, index_queue, result_queue, collate_fn, worker_id, num_workers, seed,
                worker_init_fn, prefix):
    """Runs in the worker process until it receives None (or its parent dies)."""
    global _worker_info
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
        result_queue.put(_error_message(-1, error))
        return
    while True:
        try:
            task = index_queue.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:
                return
            continue
        if task is None:
            return
        result_queue.put(_run_task(dataset, task, collate_fn, prefix))
