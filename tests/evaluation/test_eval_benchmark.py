from tianyuan import nn
from tianyuan.evaluation.benchmark import benchmark


def test_benchmark_reports_latency_and_memory():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(4, 2))
    stats = benchmark(model, batch=2, input_size=(3, 8, 8), repeats=3, warmup=1)
    assert stats["batch"] == 2 and stats["latency_ms"] > 0
    assert stats["images_per_s"] > 0 and stats["peak_traced_mb"] > 0 and stats["peak_rss_mb"] > 0
    assert stats["latency_min_ms"] <= stats["latency_ms"] <= stats["latency_p90_ms"]
