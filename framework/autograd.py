"""Define-by-run autograd: primitive Functions on numpy arrays and the reverse walk.

A primitive op subclasses `Function`, computes its output from numpy arrays in
`forward`, stores what its backward needs on `self`, and returns one gradient per
input from `backward`. `Tensor.backward()` visits the recorded graph in reverse
topological order and accumulates gradients into leaves.
"""
import contextlib

import numpy as np

_state = {"grad_enabled": True}


def is_grad_enabled():
    return _state["grad_enabled"]


class _GradMode(contextlib.ContextDecorator):
    def __init__(self, enabled):
        self.enabled = enabled
        self.previous = []

    def __enter__(self):
        self.previous.append(_state["grad_enabled"])
        _state["grad_enabled"] = self.enabled
        return self

    def __exit__(self, *exc):
        _state["grad_enabled"] = self.previous.pop()
        return False


def no_grad():
    """Context manager and decorator: ops inside record no graph.

    >>> with no_grad():
    ...     y = x * 2   # y.requires_grad is False
    """
    return _GradMode(False)


def enable_grad():
    return _GradMode(True)


_Tensor = None  # tensor.Tensor, bound at first use (tensor.py imports this module)


def _tensor_class():
    global _Tensor
    if _Tensor is None:
        from .tensor import Tensor
        _Tensor = Tensor
    return _Tensor


class Function:
    """One differentiable primitive. Subclasses implement forward/backward on numpy arrays."""

    def __init__(self):
        self.parents = ()
        self.needs_input_grad = ()
        self.freed = False

    @property
    def name(self):
        return type(self).__name__

    def forward(self, *arrays, **kwargs):
        raise NotImplementedError

    def backward(self, grad):
        raise NotImplementedError

    @classmethod
    def apply(cls, *tensors, **kwargs):
        # the Tensor class bound once (an import statement here ran on every op), lists
        # where generators were: the overhead every eager op pays, 1.0 of a slice's 2.85 us
        make = (_Tensor or _tensor_class())._make
        ctx = cls()
        needs = tuple([t.requires_grad for t in tensors])
        ctx.needs_input_grad = needs
        out = ctx.forward(*[t.data for t in tensors], **kwargs)
        if not (_state["grad_enabled"] and any(needs)):
            return make(out, False, None)
        ctx.parents = tensors
        return make(out, True, ctx)

    def free(self):
        """Drop saved arrays after a backward pass without retain_graph."""
        name = self.name
        self.__dict__.clear()
        self.freed = True
        self.freed_name = name


def _topological_order(root):
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        ctx = node._ctx
        if ctx is not None and not ctx.freed:
            for parent in ctx.parents:
                if parent.requires_grad and id(parent) not in seen:
                    stack.append((parent, False))
    return order


def _run_hooks(tensor, grad):
    Tensor = _tensor_class()
    for hook in tensor._hooks.values():
        result = hook(Tensor(grad))
        if result is not None:
            grad = result.data if isinstance(result, Tensor) else np.asarray(result)
    return grad


def _accumulate(tensor, grad):
    Tensor = _tensor_class()
    grad = grad.astype(tensor.data.dtype, copy=False)
    if tensor.grad is None:
        tensor.grad = Tensor(np.array(grad, copy=True))
    else:
        tensor.grad.data = tensor.grad.data + grad


def _propagate(node, grad, grads, retain_graph):
    ctx = node._ctx
    if ctx.freed:
        raise RuntimeError(
            f"backward: trying to go through the graph of '{ctx.freed_name}' a second time; its "
            "saved arrays were freed by the first backward. Call backward(retain_graph=True) "
            "the first time if you need to go through the graph twice.")
    parent_grads = ctx.backward(grad)
    if not isinstance(parent_grads, tuple):
        parent_grads = (parent_grads,)
    for parent, pgrad, needed in zip(ctx.parents, parent_grads, ctx.needs_input_grad):
        if not needed or pgrad is None:
            continue
        if pgrad.shape != parent.shape:
            raise RuntimeError(f"{ctx.name}.backward returned a gradient of shape {pgrad.shape} "
                               f"for an input of shape {parent.shape}")
        previous = grads.get(id(parent))
        grads[id(parent)] = pgrad if previous is None else previous + pgrad
    if not retain_graph:
        ctx.free()


def backward(root, grad=None, retain_graph=False):
    """Reverse-mode pass from `root`; leaves' `.grad` accumulate."""
    if not root.requires_grad:
        raise RuntimeError("backward: this tensor does not require grad and has no graph "
                           f"(shape {root.shape}); did you compute it under no_grad() or "
                           "detach() it?")
    if grad is None:
        if root.data.size != 1:
            raise RuntimeError("backward: a gradient can be created implicitly only for a "
                               f"single-element output, got shape {root.shape}; pass grad=")
        grad = np.ones_like(root.data)
    else:
        grad = np.asarray(getattr(grad, "data", grad), dtype=root.data.dtype)
        if grad.shape != root.shape:
            raise ValueError(f"backward: grad has shape {grad.shape}, output has shape "
                             f"{root.shape}")
    grads = {id(root): grad}
    with no_grad():
        for node in reversed(_topological_order(root)):
            g = grads.pop(id(node), None)
            if g is None:
                continue
            if type(g) is not np.ndarray:  # numpy's 0-d arithmetic gives scalars, which
                g = np.asarray(g)          # the native backward functions refuse
            if node._hooks:
                g = _run_hooks(node, g)
            if node._ctx is None or node._retains_grad:
                _accumulate(node, g)
            if node._ctx is not None:
                _propagate(node, g, grads, retain_graph)

