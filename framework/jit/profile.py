"""Where a traced graph spends its time: per step, the median over runs, and the peak memory
of one run (numpy's allocations, which hold every activation, through tracemalloc)."""
import time
import tracemalloc

import numpy as np


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
    medians = [1000.0 * float(np.median(t)) for t in times]
    steps_ms = sum(medians)
    rows = [{"step": s.output, "name": s.name, "type": s.type,
             "how": "native" if s.native else "module", "shape": list(s.shape),
             "dtype": str(s.dtype), "ms": round(ms, 4),
             "share": round(ms / steps_ms, 4) if steps_ms else 0.0}
            for s, ms in zip(graph.steps, medians)]
    return {"rows": rows, "total_ms": round(1000.0 * float(np.median(totals)), 4),
            "steps_ms": round(steps_ms, 4), "peak_mb": round(peak / 2 ** 20, 3)}


def _timed(call, times):
    def run(v):
        start = time.perf_counter()
        out = call(v)
        times.append(time.perf_counter() - start)
        return out
    return run
