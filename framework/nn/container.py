"""Containers: Sequential (children "0", "1", ...), ModuleList and ModuleDict."""
import operator
from collections import OrderedDict

from .module import Module
from .norm import fused_clamp


def _index(container, idx):
    """A valid non-negative position from an int index, or an IndexError naming the size."""
    n = len(container)
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"{type(container).__name__}: index {idx} is out of range for length {n}")
    return idx % n


class Sequential(Module):
    """Calls its children in order; `Sequential(a, b)` or `Sequential(OrderedDict(name=a))`.

    >>> from tianyuan import nn
    >>> net = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    >>> type(net[0]).__name__, len(net)
    ('Linear', 2)
    """

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, module in modules[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(modules):
                self.add_module(str(i), module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(self, idx)]

    def __setitem__(self, idx, module):
        key = list(self._modules)[_index(self, idx)]
        setattr(self, key, module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        for key in (keys[idx] if isinstance(idx, slice) else [keys[_index(self, idx)]]):
            del self._modules[key]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, x):
        if not self.training:
            for module in self._modules.values():
                x = module(x)
            return x
        # training: a BatchNorm2d then a ReLU / ReLU6, neither with hooks, run as one op (the
        # batch norm's clamp): two passes over the activation fewer, the same bits
        modules = list(self._modules.values())
        i = 0
        while i < len(modules):
            module = modules[i]
            bounds = fused_clamp(module, modules[i + 1]) if i + 1 < len(modules) else None
            if bounds is None:
                x = module(x)
                i += 1
            else:
                x = module.forward(x, clamp=bounds)
                i += 2
        return x


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ...; it has no forward."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ModuleList(list(self._modules.values())[idx])
        return self._modules[str(_index(self, idx))]

    def __setitem__(self, idx, module):
        self.add_module(str(_index(self, idx)), module)

    def __delitem__(self, idx):
        modules = list(self._modules.values())
        del modules[idx]
        self._modules.clear()
        self.extend(modules)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules.clear()
        return self.extend(modules)


class ModuleDict(Module):
    """An ordered dict of named child modules; it has no forward."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def pop(self, key):
        return self._modules.pop(key)

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for key, module in items:
            self[key] = module
