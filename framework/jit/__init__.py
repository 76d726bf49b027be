"""Tracing: `trace(model, example)` records the calls of a model's leaf modules into a static
`Graph` that runs them in order, without the model's own Python between them (containers,
identities, hooks on containers). Int8 modules run as their native kernel calls on plain
arrays (`graph_step`), so an int8 model at batch 1 loses little Python a layer.

>>> import numpy as np, tianyuan as ty
>>> from tianyuan import jit, nn
>>> net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Identity()).eval()
>>> x = ty.randn(1, 3, 8, 8)
>>> graph = jit.trace(net, x)
>>> len(graph.steps), bool(np.array_equal(graph(x).numpy(), net(x).numpy()))
(2, True)
"""
from . import passes
from .graph import Graph, trace
from .record import TraceError

__all__ = ["Graph", "TraceError", "passes", "trace"]
