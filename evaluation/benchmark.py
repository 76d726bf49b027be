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


def peak_rss_mb():
    """The process's peak resident set so far, in MiB (resource.getrusage)."""
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
            "peak_rss_mb": round(peak_rss_mb(), 1), "threads": ty.get_num_threads(),
            "isa": ty.current_isa()}


NOISY_SPREAD = 0.25   # rounds' medians further apart than this (of the median): "noisy"


def compare_latency(models, batch=1, input_size=(3, 224, 224), repeats=20, warmup=3, rounds=5,
                    seed=0, forward=None, spread=False):
    """Median latency in ms of each of `models` ({name: model}) at one batch size, in eval
    mode under no_grad: after `warmup` runs of each, `rounds` alternating rounds of about
    repeats / rounds runs of each, so that a slow spell of a shared machine hits every model
    alike instead of the one timed when it came. `forward(model, x)`: what is timed (default
    model(x); a detector's network without its box decoding, a GAN's generator). Returns
    {name: median ms}; with `spread`, {name: {"ms": median, "spread": s, "noisy": bool}}
    where s = (slowest round's median - fastest round's) / median: above NOISY_SPREAD (0.25)
    the machine was busy with something else while timing, and the figure (and the ratio
    of two) should not be trusted; rerun on a quiet machine."""
    if batch < 1 or repeats < 1 or warmup < 0 or rounds < 1:
        raise ValueError(f"compare_latency: need batch >= 1, repeats >= 1, warmup >= 0, "
                         f"rounds >= 1; got {batch}, {repeats}, {warmup}, {rounds}")
    times = _rounds(models, example_input(batch, input_size, seed),
                    forward or (lambda model, x: model(x)), warmup, rounds,
                    max(1, -(-repeats // rounds)))
    result = {}
    for name, per_round in times.items():
        median = float(np.median(np.concatenate(per_round)))
        result[name] = round(1000.0 * median, 3)
        if spread:
            result[name] = _spread(per_round, median, result[name])
    return result


def _rounds(models, x, run, warmup, rounds, per_round):
    """{name: [seconds of each run, one array per round]}, the models taking turns."""
    times = {name: [] for name in models}
    with ty.no_grad():
        for model in models.values():
            model.eval()
            for _ in range(warmup):
                run(model, x)
        for _ in range(rounds):
            for name, model in models.items():
                runs = []
                for _ in range(per_round):
                    start = time.perf_counter()
                    run(model, x)
                    runs.append(time.perf_counter() - start)
                times[name].append(np.array(runs))
    return times


def _spread(per_round, median, ms):
    medians = [float(np.median(r)) for r in per_round]
    spread = (max(medians) - min(medians)) / median if median > 0 else 0.0
    return {"ms": ms, "spread": round(spread, 3), "noisy": bool(spread > NOISY_SPREAD)}
