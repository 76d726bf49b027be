import time

import pytest

from tianyuan import nn
from tianyuan.evaluation.benchmark import NOISY_SPREAD, benchmark, compare_latency


def test_benchmark_reports_latency_and_memory():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(4, 2))
    stats = benchmark(model, batch=2, input_size=(3, 8, 8), repeats=3, warmup=1)
    assert stats["batch"] == 2 and stats["latency_ms"] > 0
    assert stats["images_per_s"] > 0 and stats["peak_traced_mb"] > 0 and stats["peak_rss_mb"] > 0
    assert stats["latency_min_ms"] <= stats["latency_ms"] <= stats["latency_p90_ms"]


def test_compare_latency_alternates_the_models():
    calls = []

    class Probe(nn.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def forward(self, x):
            calls.append(self.name)
            return x

    models = {"a": Probe("a"), "b": Probe("b")}
    models["a"].train()
    got = compare_latency(models, batch=2, input_size=(3, 4, 4), repeats=4, warmup=1, rounds=2)
    assert set(got) == {"a", "b"} and all(v >= 0 for v in got.values())
    assert not models["a"].training  # timed in eval mode
    # one warm-up each, then 2 rounds of 2 runs each, the models taking turns
    assert calls == ["a", "b", "a", "a", "b", "b", "a", "a", "b", "b"]
    with pytest.raises(ValueError, match="rounds >= 1"):
        compare_latency(models, rounds=0)


class Sleeper(nn.Module):
    """A fake model whose time is `seconds[i]` on its i-th call (the last one after that)."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds, self.calls = list(seconds), 0

    def forward(self, x):
        time.sleep(self.seconds[min(self.calls, len(self.seconds) - 1)])
        self.calls += 1
        return x


def test_compare_latency_flags_rounds_that_disagree():
    steady = Sleeper([0.01])
    # warm-up, then 2 rounds of 2 runs: the second round 4x slower (a busy neighbour)
    jumpy = Sleeper([0.01, 0.01, 0.01, 0.04, 0.04])
    got = compare_latency({"steady": steady, "jumpy": jumpy}, batch=1, input_size=(1,),
                          repeats=4, warmup=1, rounds=2, spread=True)
    assert got["jumpy"]["noisy"] and got["jumpy"]["spread"] > 0.5
    assert not got["steady"]["noisy"] and got["steady"]["spread"] < NOISY_SPREAD
    assert got["steady"]["ms"] >= 10.0
    plain = compare_latency({"steady": steady}, input_size=(1,), repeats=2, warmup=0)
    assert isinstance(plain["steady"], float)
