"""Inference speed and memory of a model at a batch size: median latency, images/s, peak memory.

>>> benchmark(model, batch=1, input_size=(3, 224, 224), repeats=20)
{"batch": 1, "latency_ms": 23.1, "images_per_s": 43.3, "peak_traced_mb": ..., ...}

Timing runs first, without tracing; memory is then measured on one more forward with
tracemalloc (numpy's allocations, which hold every activation) and as the process's
peak resident set (resource.getrusage, everything including native buffers).
"""
import resource
import sys
import time
import tracemalloc

import numpy as np

import tianyuan as ty


def _peak_rss_mb():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0  # macOS: bytes


def example_input(batch, input_size, seed=0):
    """The random float32 batch (batch, *input_size) that benchmark times the model on."""
    return ty.tensor(np.random.default_rng(seed).standard_normal(
        (batch, *input_size)).astype(np.float32))


def benchmark(model, batch=1, input_size=(3, 224, 224), repeats=20, warmup=3, seed=0):
    """Latency statistics of `model(x)` for x of shape (batch, *input_size), in eval mode
    under no_grad. `model`: an nn.Module or a traced `jit.Graph` (traced for that shape)."""
    if batch < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"benchmark: need batch >= 1, repeats >= 1, warmup >= 0; got "
                         f"{batch}, {repeats}, {warmup}")
    x = example_input(batch, input_size, seed)
    if isinstance(model, ty.nn.Module):
        model.eval()
    times = []
    with ty.no_grad():
        for i in range(warmup + repeats):
            start = time.perf_counter()
            model(x)
            if i >= warmup:
                times.append(time.perf_counter() - start)
        tracemalloc.start()
        try:
            model(x)
            _, traced_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    times = np.array(times) * 1000.0
    median = float(np.median(times))
    return {"batch": batch, "input_size": list(input_size), "repeats": repeats,
            "latency_ms": round(median, 3),
            "latency_p90_ms": round(float(np.percentile(times, 90)), 3),
            "latency_min_ms": round(float(times.min()), 3),
            "images_per_s": round(1000.0 * batch / median, 2),
            "peak_traced_mb": round(traced_peak / 2 ** 20, 2),
            "peak_rss_mb": round(_peak_rss_mb(), 1), "threads": ty.get_num_threads(),
            "isa": ty.current_isa()}


def compare_latency(models, batch=1, input_size=(3, 224, 224), repeats=20, warmup=3, rounds=5,
                    seed=0, forward=None):
    """Median latency in ms of each of `models` ({name: model}) at one batch size, in eval
    mode under no_grad: after `warmup` runs of each, `rounds` alternating rounds of about
    repeats / rounds runs of each, so that a slow spell of a shared machine hits every model
    alike instead of the one timed when it came. `forward(model, x)`: what is timed (default
    model(x); a detector's network without its box decoding, a GAN's generator). Returns
    {name: median ms}."""
    if batch < 1 or repeats < 1 or warmup < 0 or rounds < 1:
        raise ValueError(f"compare_latency: need batch >= 1, repeats >= 1, warmup >= 0, "
                         f"rounds >= 1; got {batch}, {repeats}, {warmup}, {rounds}")
    x = example_input(batch, input_size, seed)
    run = forward or (lambda model, x: model(x))
    times = {name: [] for name in models}
    per_round = max(1, -(-repeats // rounds))
    with ty.no_grad():
        for model in models.values():
            model.eval()
            for _ in range(warmup):
                run(model, x)
        for _ in range(rounds):
            for name, model in models.items():
                for _ in range(per_round):
                    start = time.perf_counter()
                    run(model, x)
                    times[name].append(time.perf_counter() - start)
    return {name: round(1000.0 * float(np.median(t)), 3) for name, t in times.items()}
