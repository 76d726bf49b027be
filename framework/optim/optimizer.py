"""Optimizer base: parameter groups, per-parameter state, and a PyTorch-shaped state dict.

A subclass lists its options in `defaults` and implements `_update(param, grad, state,
group)`, which changes `param.data` (a numpy array) in place. Parameters whose `.grad`
is None are skipped. No graph is recorded: updates work on numpy arrays directly.

>>> opt = SGD([w, b], lr=0.1, momentum=0.9)
>>> opt = SGD([{"params": backbone, "lr": 0.01}, {"params": head}], lr=0.1)
>>> loss.backward(); opt.step(); opt.zero_grad()
"""
import copy

import numpy as np

from ..autograd import enable_grad
from ..tensor import Tensor

_REQUIRED = object()  # a default with no value: every group must then give it


def required():
    """Marks an option (e.g. SGD's lr) that every parameter group must set."""
    return _REQUIRED


class Optimizer:
    def __init__(self, params, defaults):
        self.defaults = dict(defaults)
        self.state = {}  # Tensor -> dict; Tensor hashes by identity
        self.param_groups = []
        if isinstance(params, Tensor):
            raise TypeError(f"{self._name}: params must be an iterable of Tensors or of "
                            "param-group dicts, got a single Tensor; wrap it in a list")
        params = list(params)
        if not params:
            raise ValueError(f"{self._name}: got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for group in params:
            self.add_param_group(group)

    @property
    def _name(self):
        return type(self).__name__

    def __repr__(self):
        lines = [f"{self._name} ("]
        for i, group in enumerate(self.param_groups):
            options = ", ".join(f"{k}={v}" for k, v in group.items() if k != "params")
            lines.append(f"  group {i}: {len(group['params'])} params, {options}")
        return "\n".join(lines + [")"])

    def add_param_group(self, group):
        """Add `{"params": [...], **options}`; missing options come from `defaults`."""
        if not isinstance(group, dict):
            raise TypeError(f"{self._name}.add_param_group: expected a dict, "
                            f"got {type(group).__name__}")
        group = dict(group)
        params = group.get("params")
        params = [params] if isinstance(params, Tensor) else params
        if params is None or isinstance(params, (set, frozenset)):
            raise TypeError(f"{self._name}.add_param_group: 'params' must be a Tensor or an "
                            f"ordered iterable of Tensors, got {type(params).__name__}")
        group["params"] = list(params)
        index = len(self.param_groups)
        self._check_params(group["params"], index)
        for name, value in self.defaults.items():
            if value is _REQUIRED and name not in group:
                raise ValueError(f"{self._name}: parameter group {index} must set '{name}'")
            group.setdefault(name, value)
        self.param_groups.append(group)

    def _check_params(self, params, index):
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for j, p in enumerate(params):
            where = f"{self._name}: parameter {j} of group {index}"
            if not isinstance(p, Tensor):
                raise TypeError(f"{where} is a {type(p).__name__}, not a Tensor")
            if not p.requires_grad or not p.is_leaf:
                raise ValueError(f"{where} (shape {p.shape}) must be a leaf Tensor with "
                                 "requires_grad=True")
            if id(p) in seen:
                raise ValueError(f"{where} (shape {p.shape}) appears in more than one place; "
                                 "each parameter may be in one group only, once")
            seen.add(id(p))

    def zero_grad(self, set_to_none=True):
        """Drop the gradients (default), or zero them in place with `set_to_none=False`."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.data[...] = 0

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns `closure()` if given."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.setdefault(p, {})
                self._update(p, p.grad.data, state, group)
        return loss

    def _update(self, param, grad, state, group):
        raise NotImplementedError

    # ------------------------------------------------------------ state dict
    def state_dict(self):
        """`{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}`.

        Parameters are numbered across groups in order, as PyTorch does. Arrays in
        `state` are the live buffers (not copies); `tianyuan.save` it or deep-copy it.
        """
        index, groups = {}, []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)]: s for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore options and state saved by `state_dict()` (copied, cast to param dtypes)."""
        saved_groups = state_dict["param_groups"]
        self._check_layout(saved_groups)
        saved_state = {int(k): v for k, v in state_dict["state"].items()}
        self.state = {}
        for g, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            for j, (p, key) in enumerate(zip(group["params"], saved["params"])):
                if int(key) in saved_state:
                    self.state[p] = self._restore(saved_state[int(key)], p, g, j)
            options = {k: copy.deepcopy(v) for k, v in saved.items() if k != "params"}
            group.update(options)

    def _check_layout(self, saved_groups):
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"{self._name}.load_state_dict: the state dict has "
                             f"{len(saved_groups)} parameter groups, this optimizer has "
                             f"{len(self.param_groups)}")
        for g, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(f"{self._name}.load_state_dict: group {g} has "
                                 f"{len(saved['params'])} parameters in the state dict and "
                                 f"{len(group['params'])} in this optimizer")

    def _restore(self, saved, param, g, j):
        state = {}
        for name, value in saved.items():
            if isinstance(value, Tensor):
                value = value.data
            if isinstance(value, np.ndarray) and value.shape == param.shape:
                value = np.array(value, dtype=param.dtype, copy=True)
            elif isinstance(value, np.ndarray) and value.ndim == 0:
                value = value.item()  # a `step` saved as a 0-d array (by another framework)
            elif isinstance(value, np.ndarray):
                raise ValueError(f"{self._name}.load_state_dict: state '{name}' of parameter "
                                 f"{j} in group {g} has shape {value.shape}, the parameter "
                                 f"has shape {param.shape}")
            state[name] = copy.deepcopy(value)
        return state
