"""Running saved graphs: `load(path)` gives the `jit.Graph` a `graph.save(path)` wrote,
without the model's code.

>>> graph = tianyuan.runtime.load("mobilenet_v2_int8.graph")
>>> logits = graph(x)      # x of the traced shape and dtype
"""
from ..jit.serialize import load

__all__ = ["load"]
