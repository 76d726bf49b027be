"""Graph passes: `trace(model, x, fuse=True)` folds each float conv's batch norm and
activation into the conv (quantization.fuse on a copy of the model, then traced again).

A group is a float Conv2d whose result only a BatchNorm2d (or FrozenBatchNorm2d) reads, then
optionally a ReLU or ReLU6 that alone reads the batch norm's result (or the ReLU straight after
the conv), none of them called anywhere else and no intermediate a result of the graph. The fused graph gives
the fused copy's result bit for bit and the model's within float rounding (checked).
"""
import copy
from collections import defaultdict

import numpy as np

from .. import nn

_ACTIVATIONS = (nn.ReLU, nn.ReLU6)


def fusion_groups(graph):
    """[[conv, bn(, act)] or [conv, act]] as dotted module names, in step order."""
    readers, calls = defaultdict(list), defaultdict(int)
    for step in graph.steps:
        calls[id(step.module)] += step.module is not None
        for entry in step.inputs:
            for i in entry if isinstance(entry, tuple) else (entry,):
                if isinstance(i, int):
                    readers[i].append(step)
    results = set(graph.outputs if isinstance(graph.outputs, (list, tuple))
                  else [graph.outputs])

    def sole_reader(step, classes):
        found = readers[step.output]
        if len(found) != 1 or step.output in results:
            return None
        reader = found[0]
        ok = (type(reader.module) in classes and calls[id(reader.module)] == 1 and
              reader.inputs == (step.output,) and not reader.kwargs)
        return reader if ok else None

    groups = []
    for step in graph.steps:
        if type(step.module) is not nn.Conv2d or calls[id(step.module)] != 1:
            continue
        group = [step]
        bn = sole_reader(step, (nn.BatchNorm2d, nn.FrozenBatchNorm2d))
        if bn is not None:
            group.append(bn)
        act = sole_reader(group[-1], _ACTIVATIONS)
        if act is not None:
            group.append(act)
        if len(group) > 1:
            groups.append([s.name for s in group])
    return groups


def fused_copy(model, groups):
    """A deep copy of `model` with `groups` fused (quantization.fuse), in eval mode."""
    from ..quantization import fuse
    return fuse(copy.deepcopy(model), groups).eval()


def close_to(fused, expected):
    """Whether the fused graph's results are the model's within float rounding."""
    pairs = (zip(fused, expected) if isinstance(fused, (list, tuple))
             else [(fused, expected)])
    for got, want in pairs:
        g, w = np.asarray(got.data, np.float64), np.asarray(want.data, np.float64)
        scale = max(float(np.abs(w).max(initial=0.0)), 1e-6)
        if g.shape != w.shape or not np.allclose(g, w, rtol=1e-3, atol=1e-4 * scale):
            return False
    return True
