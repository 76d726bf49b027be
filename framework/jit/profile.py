"""Where a traced graph spends its time and memory: per step, the median over runs; the peak
of one run's numpy allocations (tracemalloc: every activation); the memory plan for these
inputs (jit/memory.py: the arena, the sum of all activations, the steps that still allocate
their result) and the measured peak, the rise of the process's resident set over one run."""
import ctypes
import time
import tracemalloc
from collections import Counter

import numpy as np

from ..autograd import no_grad
from . import memory


def profile(graph, inputs, repeats=10, warmup=2):
    """{"rows": per step {step, name, type, how, shape, dtype, ms, share}, "total_ms": median
    of whole runs, "steps_ms": the steps' medians summed, "peak_mb": one run's peak}."""
    times = [[] for _ in graph.steps]
    plan = graph._plan
    graph._plan = [(_timed(call, times[k]), out, frees)
                   for k, (call, out, frees) in enumerate(plan)]
    try:
        for _ in range(warmup):
            graph(*inputs)
        for t in times:
            t.clear()
        totals = []
        for _ in range(repeats):
            start = time.perf_counter()
            graph(*inputs)
            totals.append(time.perf_counter() - start)
    finally:
        graph._plan = plan
    tracemalloc.start()
    try:
        graph(*inputs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    figures = memory_figures(graph, inputs)
    medians = [1000.0 * float(np.median(t)) for t in times]
    steps_ms = sum(medians)
    rows = [{"step": s.output, "name": s.name, "type": s.type,
             "how": "native" if s.native else "module", "shape": list(s.shape),
             "dtype": str(s.dtype), "ms": round(ms, 4),
             "share": round(ms / steps_ms, 4) if steps_ms else 0.0}
            for s, ms in zip(graph.steps, medians)]
    return {"rows": rows, "total_ms": round(1000.0 * float(np.median(totals)), 4),
            "steps_ms": round(steps_ms, 4), "peak_mb": round(peak / 2 ** 20, 3), **figures}


def memory_figures(graph, inputs):
    """{arena_mb, activations_mb, peak_rss_mb, inplace, allocating}: the plan for these
    inputs' shapes (a graph for any batch runs other sizes than traced), one run's rise of
    the resident set (None where /proc cannot say), and per step type the count of steps that
    still allocate their result (every step that owns a buffer and does not run in place:
    the native kernels return new arrays)."""
    with no_grad():
        roots, seen = memory.alias_roots(graph, graph._values(inputs))
    plan = memory.plan(graph, roots, seen)
    inplace = {k for k, _ in plan.inplace}
    allocating = Counter(s.type for k, s in enumerate(graph.steps)
                         if roots[s.output] == s.output and k not in inplace and
                         plan.buffer_of(s.output) is not None)
    return {"arena_mb": round(plan.arena / 2 ** 20, 3),
            "activations_mb": round(plan.total / 2 ** 20, 3),
            "peak_rss_mb": rss_rise(lambda: graph(*inputs)),
            "inplace": len(plan.inplace), "allocating": dict(allocating.most_common())}


def _status(key):
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {key} in /proc/self/status")


def rss_rise(run):
    """MiB the resident set rose above where it was during run(): the high-water mark
    (VmHWM, reset first through /proc/self/clear_refs) less the resident set before, the C
    heap first trimmed (`import tianyuan` keeps freed blocks, so after a warm-up run the
    rise had read 0). None where /proc cannot reset or tell it."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):   # not glibc: the heap as it is
        pass
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        before = _status("VmRSS")
    except OSError:
        return None
    run()
    return round((_status("VmHWM") - before) / 2 ** 20, 3)


def _timed(call, times):
    def run(v):
        start = time.perf_counter()
        out = call(v)
        times.append(time.perf_counter() - start)
        return out
    return run
