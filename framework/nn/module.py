"""Module: the base class of every layer and model.

Attributes register themselves: a `Parameter` becomes a parameter, a `Module` a child,
and `register_buffer` adds state that is saved but not learned (BN running stats).
`state_dict()` is a flat {dotted.name: numpy array} in PyTorch's order (each module's
parameters, then its buffers, then its children), so torchvision files load by name.

>>> import tianyuan as ty
>>> from tianyuan import nn
>>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> list(net.state_dict())
['0.weight', '0.bias', '2.weight', '2.bias']
"""
import itertools
from collections import OrderedDict, namedtuple

import numpy as np

from .. import dtypes
from ..tensor import Tensor
from .parameter import Parameter
from .state_checks import array_of, check_dtypes, load_error

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])
_hook_ids = itertools.count()


class RemovableHandle:
    """Returned by hook registration; `remove()` (or leaving a `with` block) unregisters."""

    def __init__(self, hooks, key):
        self.hooks, self.key = hooks, key

    def remove(self):
        self.hooks.pop(self.key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def _check_name(module, name, kind):
    if not isinstance(name, str) or not name or "." in name:
        raise KeyError(f"{type(module).__name__}: {kind} name must be a non-empty string "
                       f"without '.', got {name!r}")


def _indent(text, spaces):
    lines = text.split("\n")
    return "\n".join([lines[0]] + [" " * spaces + line for line in lines[1:]])


class Module:
    """Base class: subclasses set attributes in `__init__` and compute in `forward`."""

    def __init__(self):
        state = self.__dict__
        state["training"] = True
        state["_parameters"] = OrderedDict()
        state["_buffers"] = OrderedDict()
        state["_non_persistent"] = set()
        state["_modules"] = OrderedDict()
        state["_forward_hooks"] = OrderedDict()
        state["_forward_pre_hooks"] = OrderedDict()

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}: forward() is not implemented")

    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks):
            # the usual case, without copying two empty hook lists (they show in a batch-1
            # int8 model's module calls: bench/RESULTS.md, Python overheads)
            return self.forward(*args, **kwargs)
        for hook in list(self._forward_pre_hooks.values()):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            result = hook(self, args, out)
            if result is not None:
                out = result
        return out

    # ------------------------------------------------------------ registration
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: cannot assign '{name}' before "
                                 "Module.__init__() has run (call super().__init__() first)")
        if isinstance(value, Parameter):
            self._discard(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._discard(name)
            self._modules[name] = value
        elif name in self._parameters:
            if value is not None:
                raise TypeError(f"{type(self).__name__}: cannot assign {type(value).__name__} to "
                                f"parameter '{name}' (a Parameter or None is expected)")
            self._parameters[name] = None
        elif name in self._modules:
            if value is not None:
                raise TypeError(f"{type(self).__name__}: cannot assign {type(value).__name__} to "
                                f"child module '{name}' (a Module or None is expected)")
            self._modules[name] = None
        elif name in self._buffers:
            self._buffers[name] = self._as_buffer(name, value)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        # only called when ordinary lookup fails
        state = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in state and name in state[table]:
                return state[table][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    def _discard(self, name):
        self.__dict__.pop(name, None)
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        self._non_persistent.discard(name)

    def _as_buffer(self, name, value):
        if value is None or isinstance(value, Tensor):
            return value
        if isinstance(value, np.ndarray):
            return Tensor(value)
        raise TypeError(f"{type(self).__name__}: buffer '{name}' must be a Tensor, a numpy array "
                        f"or None, got {type(value).__name__}")

    def register_parameter(self, name, param):
        _check_name(self, name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"{type(self).__name__}: register_parameter('{name}') expects a "
                            f"Parameter or None, got {type(param).__name__}")
        self._discard(name)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """State that is saved (unless persistent=False) but not learned, e.g. running_mean."""
        _check_name(self, name, "buffer")
        value = self._as_buffer(name, tensor)
        self._discard(name)
        self._buffers[name] = value
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        _check_name(self, name, "module")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(self).__name__}: add_module('{name}') expects a Module, got "
                            f"{type(module).__name__}")
        self._discard(name)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        """The module at dotted path `target` ('' is self), e.g. 'layer1.0.conv1'."""
        module = self
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(self).__name__}.get_submodule: no submodule "
                                     f"'{part}' in '{target}'")
            module = child
        return module

    # ------------------------------------------------------------ iteration
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(dotted name, module) for self and every descendant, pre-order."""
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                sub = f"{prefix}.{name}" if prefix else name
                yield from child.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        return (m for _, m in self.named_modules())

    def named_children(self):
        seen = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self):
        return (m for _, m in self.named_children())

    def _named_members(self, table, prefix, recurse, remove_duplicate):
        seen = set()
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else [(prefix, self)])
        for module_prefix, module in modules:
            for name, value in getattr(module, table).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """(dotted name, Parameter); a parameter shared by two modules comes once."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        return (b for _, b in self.named_buffers(recurse=recurse))

    # ------------------------------------------------------------ state
    def _state_tensors(self, destination, prefix):
        """Fill `destination` with {name: Tensor} exactly as state_dict orders it."""
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent:
                destination[prefix + name] = buf
        for name, child in self._modules.items():
            if child is not None:
                child._state_tensors(destination, f"{prefix}{name}.")
        return destination

    def state_dict(self, prefix="", keep_vars=False):
        """Flat OrderedDict {dotted.name: numpy copy}; keep_vars gives the tensors themselves."""
        tensors = self._state_tensors(OrderedDict(), prefix)
        if keep_vars:
            return tensors
        return OrderedDict((name, np.array(t.data, copy=True)) for name, t in tensors.items())

    def _lazy_state(self):
        """{dotted name: (module, attribute)} of the state whose shape data sets: buffers
        registered as None (an observer's range) and empty parameters (LSQ's scale)."""
        lazy = {}
        for prefix, module in self.named_modules():
            dot = f"{prefix}." if prefix else ""
            for name, buf in module._buffers.items():
                if buf is None and name not in module._non_persistent:
                    lazy[dot + name] = (module, name)
            for name, param in module._parameters.items():
                if param is not None and param.data.size == 0:
                    lazy[dot + name] = (module, name)
        return lazy

    def load_state_dict(self, state_dict, strict=True):
        """Copy arrays (or tensors) into the parameters and buffers in place, by name.

        Shape mismatches are always errors; missing and unexpected keys are errors when
        `strict`. The error names every offending key, and nothing is copied when it is
        raised. State not shaped yet (a None buffer, an empty parameter: an observer's
        range, a learned scale before data) takes the saved array, so a QAT checkpoint
        loads into a freshly prepared model. Returns (missing_keys, unexpected_keys).
        """
        expected = self._state_tensors(OrderedDict(), "")
        lazy = {k: v for k, v in self._lazy_state().items() if k in state_dict}
        missing = [k for k in expected if k not in state_dict]
        ignored = self._ignored_on_load()
        unexpected = [k for k in state_dict
                      if k not in expected and k not in lazy and k not in ignored]
        given = {k: np.shape(array_of(state_dict[k])) for k in expected if k in state_dict}
        mismatched = [(k, given[k], t.shape) for k, t in expected.items()
                      if k in given and given[k] != t.shape and k not in lazy]
        if mismatched or (strict and (missing or unexpected)):
            raise RuntimeError(load_error(type(self).__name__, missing if strict else [],
                                  unexpected if strict else [], mismatched))
        check_dtypes(state_dict, {**expected, **{k: None for k in lazy}})
        for key, tensor in expected.items():
            if key in state_dict and key not in lazy:
                np.copyto(tensor.data, np.asarray(array_of(state_dict[key])), casting="unsafe")
        for key, (module, name) in lazy.items():
            array = np.array(array_of(state_dict[key]), copy=True)
            if name in module._parameters:
                module._parameters[name].data = array.astype(module._parameters[name].dtype)
            else:
                setattr(module, name, Tensor(array))
        for module in self.modules():
            module._state_loaded()
        return IncompatibleKeys(missing, unexpected)

    def _ignored_on_load(self):
        """Dotted names load_state_dict accepts and drops: each module's `ignored_on_load`
        (FrozenBatchNorm2d takes a BatchNorm2d's state less its num_batches_tracked)."""
        return {f"{prefix}.{name}" if prefix else name
                for prefix, module in self.named_modules()
                for name in getattr(module, "ignored_on_load", ())}

    def _state_loaded(self):
        """Called on every module after load_state_dict has copied the state in: a module
        that derives something from its parameters or buffers (packed int8 weights, cached
        requantization constants) rebuilds it here."""

    # ------------------------------------------------------------ modes and utilities
    def train(self, mode=True):
        for module in self.modules():
            module.__dict__["training"] = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for param in self.parameters():
            if set_to_none or param.grad is None:
                param.grad = None
            else:
                param.grad.data[...] = 0

    def apply(self, fn):
        """fn(module) for every descendant (children first), then self; returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def astype(self, dtype):
        """Cast floating parameters and buffers in place (keeps their identity); returns self."""
        dtype = dtypes.as_dtype(dtype, f"{type(self).__name__}.astype")
        for tensor in itertools.chain(self.parameters(), self.buffers()):
            if dtypes.is_floating(tensor.dtype):
                tensor.data = tensor.data.astype(dtype)
                tensor.grad = None
        return self

    def float(self):
        return self.astype(dtypes.float32)

    def double(self):
        return self.astype(dtypes.float64)

    # ------------------------------------------------------------ hooks
    def register_forward_pre_hook(self, hook):
        """hook(module, args) -> None or new args, before forward."""
        key = next(_hook_ids)
        self._forward_pre_hooks[key] = hook
        return RemovableHandle(self._forward_pre_hooks, key)

    def register_forward_hook(self, hook):
        """hook(module, args, output) -> None or a replacement output, after forward."""
        key = next(_hook_ids)
        self._forward_hooks[key] = hook
        return RemovableHandle(self._forward_hooks, key)

    # ------------------------------------------------------------ printing
    def extra_repr(self):
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        body = extra.split("\n") if extra else []
        body += [f"({name}): {_indent(repr(child), 2)}" for name, child in self._modules.items()]
        if not self._modules:
            return f"{type(self).__name__}({extra})"
        return type(self).__name__ + "(\n  " + "\n  ".join(body) + "\n)"
