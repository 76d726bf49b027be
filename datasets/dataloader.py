"""DataLoader: batches from worker processes through shared memory, in sampler order.

- Augmentation is deterministic per sample: sample `pos` of batch `b` in epoch `e` draws
  from a generator seeded by (seed, e, b, pos), so 0 workers and N workers give the same
  batches for the same seed. Worker `w` also seeds `random`/`np.random` with seed + w.
- A worker's exception is re-raised here, with the worker's traceback and the dataset
  index; a dead worker (e.g. killed) raises instead of hanging; `timeout` bounds the wait.
- Items that are None (unreadable images with on_error="skip") are dropped and reported
  once per epoch.
- Stopping the workers never waits for ever: a stop flag and a stop message, a bounded join,
  then SIGTERM, then SIGKILL (each with SIGCONT, for a stopped worker). The stop does not
  depend on the index queues: in a garbage-collected loader their feeder threads may already
  have been finalized, and a message put there is never sent.

>>> loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=2, seed=0)  # doctest: +SKIP
>>> for batch in loader: ...                                                     # doctest: +SKIP
"""
import atexit
import multiprocessing
import os
import signal
import time
import uuid
import warnings
import weakref
from multiprocessing import connection, resource_tracker

import numpy as np

from . import _worker
from .collate import default_collate
from .samplers import BatchSampler, RandomSampler, SequentialSampler

_POLL_S = 0.2
_LIVE_POOLS = weakref.WeakSet()


@atexit.register
def _shutdown_live_pools():
    # persistent or abandoned workers still hold segments at exit: unlink them, do not leak
    for pool in list(_LIVE_POOLS):
        pool.shutdown()


class DataLoaderWorkerError(RuntimeError):
    """A worker failed with an exception that could not be re-created with its own type."""


def _start_method(requested):
    if requested is not None:
        return requested
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


class DataLoader:
    """Iterate batches of `dataset`. Either `shuffle` (RandomSampler seeded by `seed`),
    `sampler`, or `batch_sampler` chooses the indices. `prefetch` batches per worker are
    kept in flight. `persistent_workers` keeps the workers between epochs."""

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, drop_last=False, timeout=0.0, prefetch=2,
                 persistent_workers=False, seed=None, worker_init_fn=None, start_method=None):
        if batch_sampler is not None and (sampler is not None or shuffle or drop_last):
            raise ValueError("DataLoader: batch_sampler excludes sampler, shuffle and drop_last")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: give either sampler or shuffle=True, not both")
        if num_workers < 0 or prefetch < 1 or timeout < 0:
            raise ValueError(f"DataLoader: need num_workers >= 0, prefetch >= 1, timeout >= 0; "
                             f"got {num_workers}, {prefetch}, {timeout}")
        self.dataset, self.num_workers = dataset, num_workers
        self.seed = int(np.random.SeedSequence().entropy % 2 ** 62) if seed is None else int(seed)
        if batch_sampler is None:
            if sampler is None:
                sampler = RandomSampler(dataset, self.seed) if shuffle else \
                    SequentialSampler(dataset)
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn or default_collate
        self.timeout, self.prefetch = float(timeout), int(prefetch)
        self.persistent_workers, self.worker_init_fn = persistent_workers, worker_init_fn
        self.start_method = _start_method(start_method)
        self.epoch, self.num_skipped = 0, 0
        self._pool = None

    def __len__(self):
        return len(self.batch_sampler)

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        if hasattr(self.batch_sampler, "set_epoch"):
            self.batch_sampler.set_epoch(epoch)
        self.num_skipped = 0
        batches = self._main_process(epoch) if self.num_workers == 0 else self._workers(epoch)
        for batch, skipped in batches:
            self.num_skipped += skipped
            if batch is not None:
                yield batch
        if self.num_skipped:
            warnings.warn(f"DataLoader: {self.num_skipped} items were skipped in epoch {epoch} "
                          "(unreadable images, on_error='skip')", RuntimeWarning, stacklevel=2)

    def _main_process(self, epoch):
        for number, indices in enumerate(self.batch_sampler):
            try:
                yield _worker.fetch_batch(self.dataset, indices, self.collate_fn,
                                          (self.seed, epoch, number))
            except _worker.FetchError as error:
                original = error.original
                where = "in collate_fn" if error.index is None else f"dataset index {error.index}"
                if hasattr(original, "add_note"):
                    original.add_note(f"DataLoader: while loading {where} (batch {number})")
                original.dataset_index = error.index
                raise original from None

    def _workers(self, epoch):
        if self._pool is None or not self._pool.alive():
            self._pool = _WorkerPool(self)
        pool = self._pool
        try:
            yield from pool.run(epoch)
        finally:
            if not self.persistent_workers or not pool.healthy:
                pool.shutdown()
                self._pool = None

    def close(self):
        """Stop persistent workers now (they also stop when the loader is collected)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _WorkerPool:
    def __init__(self, loader):
        self.loader = loader
        context = multiprocessing.get_context(loader.start_method)
        resource_tracker.ensure_running()  # one tracker shared by the workers (fork inherits)
        self.prefix = f"ty{os.getpid() % 100000}{uuid.uuid4().hex[:6]}"
        self.index_queues, self.readers, self.processes = [], [], []
        self.serial, self.next_worker, self.healthy = 0, 0, True
        self.outstanding = {}   # serial -> (worker, batch number, indices, owning run)
        self.run_id = 0
        _LIVE_POOLS.add(self)
        self.stop = context.RawValue("b", 0)   # set: the workers return before their next task
        with _worker.opencv_pool_stopped(), _worker.signals_blocked():
            self._start_workers(context)

    def _start_workers(self, context):
        loader = self.loader
        for worker_id in range(loader.num_workers):
            index_queue = context.Queue()
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker.worker_loop, daemon=True,
                args=(loader.dataset, index_queue, writer, loader.collate_fn, worker_id,
                      loader.num_workers, loader.seed + worker_id, loader.worker_init_fn,
                      self.prefix, self.stop))
            process.start()
            writer.close()  # the worker holds the only write end: its death reads as EOF
            self.index_queues.append(index_queue)
            self.readers.append(reader)
            self.processes.append(process)

    def alive(self):
        return self.healthy and all(p.is_alive() for p in self.processes)

    def run(self, epoch):
        """Yield (batch, skipped) in sampler order; tasks in flight <= prefetch * workers."""
        self.run_id += 1
        tasks = enumerate(self.loader.batch_sampler)
        ready, wanted, exhausted = {}, 0, False
        limit = self.loader.prefetch * len(self.processes)
        while True:
            while not exhausted and self._in_flight() < limit:
                task = next(tasks, None)
                if task is None:
                    exhausted = True
                else:
                    self._send(epoch, *task)
            if wanted in ready:
                yield ready.pop(wanted)
                wanted += 1
                continue
            if exhausted and self._in_flight() == 0:
                return
            number, result = self._receive()
            ready[number] = result

    def _in_flight(self):
        return sum(1 for info in self.outstanding.values() if info[3] == self.run_id)

    def _send(self, epoch, number, indices):
        worker = self.next_worker
        self.next_worker = (worker + 1) % len(self.processes)
        self.serial += 1
        self.outstanding[self.serial] = (worker, number, list(indices), self.run_id)
        self.index_queues[worker].put((self.serial, (self.loader.seed, epoch, number), indices))

    def _receive(self):
        """(batch number, (batch, skipped)) of the next result of the current run."""
        started = time.monotonic()
        while True:
            ready = connection.wait(self.readers, timeout=_POLL_S)
            for reader in ready:
                found = self._accept(self._read(reader))
                if found is not None:
                    return found
            if ready:
                continue
            self._check_workers()
            waited = time.monotonic() - started
            if self.loader.timeout and waited > self.loader.timeout:
                self.healthy = False
                raise TimeoutError(f"DataLoader: no batch from the workers in {waited:.1f} s "
                                   f"(timeout={self.loader.timeout}); waiting for "
                                   f"{self._waiting_for()}")

    def _read(self, reader):
        """One message from a worker's pipe (Connection.recv: multiprocessing's own transport
        between this process and the workers it forked, as in multiprocessing.Queue)."""
        try:
            return reader.recv()
        except EOFError:
            worker = self.readers.index(reader)
            self.processes[worker].join(1.0)  # it closed its end: it is exiting
            self._check_workers()
            self.healthy = False
            raise RuntimeError(f"DataLoader worker {worker} closed its result pipe while alive")
        except Exception as error:
            self.healthy = False
            raise DataLoaderWorkerError(
                f"DataLoader: a message from worker {self.readers.index(reader)} could not be "
                f"decoded here: {type(error).__name__}: {error}") from error

    def _accept(self, message):
        kind, serial = message[0], message[1]
        info = self.outstanding.pop(serial, None)
        if kind == "error":
            self.healthy = False
            raise _rebuild_error(message, info)
        tree, size, skipped = message[2:]
        if info is None or info[3] != self.run_id:  # from an abandoned earlier epoch
            _worker.unlink_quietly(_worker.segment_name(self.prefix, serial))
            return None
        return info[1], (_worker.unpack(tree, _worker.segment_name(self.prefix, serial), size),
                         skipped)

    def _waiting_for(self):
        pending = sorted(self.outstanding.values(), key=lambda info: info[1])[:1]
        return ", ".join(f"batch {n} (dataset indices {ix}) on worker {w}"
                         for w, n, ix, _ in pending) or "nothing"

    def _check_workers(self):
        for worker_id, process in enumerate(self.processes):
            if process.is_alive():
                continue
            self.healthy = False
            code = process.exitcode
            how = f"was killed by {signal.Signals(-code).name}" if code and code < 0 else \
                f"exited with code {code}"
            jobs = sorted((n, ix) for w, n, ix, _ in self.outstanding.values() if w == worker_id)
            held = f"; its next batch was {jobs[0][0]} (dataset indices {jobs[0][1]})" + \
                (f" with {len(jobs) - 1} more queued" if len(jobs) > 1 else "") if jobs else ""
            raise RuntimeError(
                f"DataLoader worker {worker_id} (pid {process.pid}) {how} unexpectedly{held}"
                + ". Out of memory (the OOM killer) is a common cause; try fewer workers or "
                "num_workers=0 to see errors directly")

    def shutdown(self):
        """Stop the workers, then unlink the segments of every task that never came back."""
        if self.readers is None:
            return
        self.stop.value = 1
        for index_queue in self.index_queues:
            try:
                index_queue.put(None)
            except (OSError, ValueError):
                pass
        _end_processes(self.processes, 2.0 if self.healthy else 0.3)
        self._drain()
        for serial in list(self.outstanding):
            _worker.unlink_quietly(_worker.segment_name(self.prefix, serial))
        self.outstanding.clear()
        for q in self.index_queues:
            q.cancel_join_thread()
            q.close()
        for reader in self.readers:
            reader.close()
        self.processes, self.index_queues, self.readers = [], [], None
        _LIVE_POOLS.discard(self)

    def _drain(self):
        """Read what the stopped workers had sent, unlinking the segments it names."""
        for reader in self.readers:
            while True:
                try:
                    if not reader.poll(0.05):
                        break
                    message = reader.recv()
                except Exception:   # EOF, a closed pipe, an undecodable message
                    break
                if message[0] == "ok":
                    self.outstanding.pop(message[1], None)
                    _worker.unlink_quietly(_worker.segment_name(self.prefix, message[1]))


def _end_processes(processes, grace):
    """Join `processes` for `grace` seconds in all, then SIGTERM what is left and SIGKILL what
    still lives a second later. Each signal comes with SIGCONT: a stopped (SIGSTOP) process
    acts on neither a message nor SIGTERM, and multiprocessing's exit handler would join it
    for ever."""
    _join_all(processes, grace)
    for signum in (signal.SIGTERM, signal.SIGKILL):
        left = [process for process in processes if process.is_alive()]
        for process in left:
            for sent in (signum, signal.SIGCONT):
                try:
                    os.kill(process.pid, sent)   # not yet joined: the pid is still its own
                except ProcessLookupError:
                    pass
        _join_all(left, 1.0)


def _join_all(processes, seconds):
    deadline = time.monotonic() + seconds
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))


def _rebuild_error(message, info):
    """The worker's exception type with the index and the worker's traceback in its message."""
    _, serial, index, kind, text, worker_traceback = message
    worker = "?" if info is None else info[0]
    if serial == -1:
        where = "in worker_init_fn"
    elif index is None:
        where = f"in collate_fn for dataset indices {info[2] if info else '?'}"
    else:
        where = f"on dataset index {index}"
    full = (f"DataLoader worker {worker} failed {where}: {text}\n\n"
            f"Traceback in the worker process:\n{worker_traceback}")
    try:
        error = kind(full)
    except Exception:
        error = DataLoaderWorkerError(full)
    if not isinstance(error, BaseException):
        error = DataLoaderWorkerError(full)
    error.dataset_index = index
    return error
