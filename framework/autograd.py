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
        # where generators were: the overhead every eager op pays (bench/RESULTS.md, threads,
        # memory and the process: Python overheads)
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


def _topological_order(root, roots=()):
    """Nodes reachable from `root` (and `roots`) through tensors that require grad, each
    after its parents."""
    order, seen = [], set()
    stack = [(r, False) for r in reversed((root,) + tuple(roots))] if roots else [(root, False)]
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


def _run_hooks(tensor, grad, as_tensor=False):
    """Each hook of `tensor` on its gradient (a numpy array; a Tensor with `as_tensor`)."""
    Tensor = _tensor_class()
    for hook in tensor._hooks.values():
        result = hook(grad if as_tensor else Tensor(grad))
        if result is not None and as_tensor:
            grad = result if isinstance(result, Tensor) else Tensor(np.asarray(result))
        elif result is not None:
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



# ---------------------------------------------------------------- autograd.grad

def grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None,
         allow_unused=False):
    """Gradients of `outputs` with respect to `inputs`, returned as a tuple of Tensors (None
    for an unused input with `allow_unused`); no `.grad` of any tensor changes.

    `grad_outputs`: one per output (None: ones, for a single-element output). With
    `create_graph` the gradients carry a graph of their own, so a function of them (WGAN-GP's
    penalty) back-propagates; each op on the way must have a graph-building backward
    (tianyuan.functional.double_backward). `retain_graph` defaults to `create_graph`.

    >>> x = ty.tensor([3.0], requires_grad=True)
    >>> (dx,) = grad((x ** 3).sum(), x, create_graph=True)   # 3 x^2 = 27
    >>> grad(dx.sum(), x)[0].numpy()                           # 6 x
    array([18.], dtype=float32)
    """
    Tensor = _tensor_class()
    outputs = _as_tuple(outputs, "outputs")
    inputs = _as_tuple(inputs, "inputs")
    seeds = _seed_grads(outputs, grad_outputs, create_graph)
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"autograd.grad: input {i} (shape {t.shape}) does not require "
                               "grad; call requires_grad_() on it before the forward pass")
    retain = create_graph if retain_graph is None else retain_graph
    wanted = {id(t): i for i, t in enumerate(inputs)}
    order = _topological_order(outputs[0], outputs[1:])
    needed = _leads_to(order, wanted)
    found = [None] * len(inputs)
    grads = {}
    for out, seed in zip(outputs, seeds):
        previous = grads.get(id(out))
        grads[id(out)] = seed if previous is None else previous + seed
    with (enable_grad() if create_graph else no_grad()):
        for node in reversed(order):
            g = grads.pop(id(node), None)
            if g is None or not needed.get(id(node)):
                continue
            if node._hooks:
                g = _run_hooks(node, g, create_graph)
            if id(node) in wanted:
                found[wanted[id(node)]] = g
            if node._ctx is not None:
                _propagate_masked(node, g, grads, retain, create_graph, needed)
    return tuple(_result(g, t, i, allow_unused, Tensor)
                 for i, (g, t) in enumerate(zip(found, inputs)))


def _as_tuple(tensors, what):
    Tensor = _tensor_class()
    if isinstance(tensors, Tensor):
        return (tensors,)
    tensors = tuple(tensors)
    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError(f"autograd.grad: {what} must be a Tensor or a non-empty sequence of "
                        f"Tensors, got {[type(t).__name__ for t in tensors]}")
    return tensors


def _seed_grads(outputs, grad_outputs, create_graph):
    """The gradient each output starts with: numpy arrays, or Tensors under create_graph."""
    Tensor = _tensor_class()
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = (grad_outputs,) * (1 if isinstance(grad_outputs, Tensor) else
                                          len(outputs))
    grad_outputs = tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"autograd.grad: {len(grad_outputs)} grad_outputs for {len(outputs)} "
                         "outputs")
    seeds = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if not out.requires_grad:
            raise RuntimeError(f"autograd.grad: output {i} (shape {out.shape}) does not require "
                               "grad and has no graph; was it computed under no_grad() or "
                               "detach()ed?")
        if g is None:
            if out.data.size != 1:
                raise RuntimeError("autograd.grad: a gradient can be created implicitly only "
                                   f"for a single-element output; output {i} has shape "
                                   f"{out.shape}: pass grad_outputs")
            g = np.ones_like(out.data)
        else:
            g = getattr(g, "data", g) if not create_graph else g
            if np.shape(getattr(g, "data", g)) != out.shape:
                raise ValueError(f"autograd.grad: grad_outputs[{i}] has shape "
                                 f"{np.shape(getattr(g, 'data', g))}, output {i} has shape "
                                 f"{out.shape}")
        if create_graph:
            seeds.append(g if isinstance(g, Tensor) else Tensor(np.asarray(g, out.data.dtype)))
        else:
            seeds.append(np.asarray(g, dtype=out.data.dtype))
    return seeds


def _leads_to(order, wanted):
    """{id(node): True} for the nodes on a path to one of the `wanted` inputs (order: parents
    first), so the walk computes no gradient nobody asked for."""
    needed = {}
    for node in order:
        ctx = node._ctx
        # a freed op's parents are unknown: walked into, it raises the second-pass error
        hit = id(node) in wanted or (ctx is not None and (ctx.freed or any(
            needed.get(id(p), False) for p in ctx.parents)))
        if hit:
            needed[id(node)] = True
    return needed


def _propagate_masked(node, g, grads, retain_graph, create_graph, needed):
    """_propagate with the op asked only for the gradients of `needed` parents; under
    create_graph the op's graph-building backward runs on Tensors."""
    ctx = node._ctx
    if ctx.freed:
        raise RuntimeError(
            f"autograd.grad: trying to go through the graph of '{ctx.freed_name}' a second "
            "time; its saved arrays were freed by the first pass. Pass retain_graph=True (or "
            "backward(retain_graph=True)) the first time.")
    mask = tuple(needed.get(id(p), False) for p in ctx.parents)
    if not any(mask):
        return
    original = ctx.needs_input_grad
    ctx.needs_input_grad = tuple(n and m for n, m in zip(original, mask))
    try:
        if create_graph:
            _propagate_graph(node, g, grads)
        else:
            _propagate(node, g if type(g) is np.ndarray else np.asarray(g), grads, True)
    finally:
        ctx.needs_input_grad = original
    if not retain_graph:
        ctx.free()


def _propagate_graph(node, g, grads):
    ctx = node._ctx
    from .functional.double_backward import graph_backward
    parent_grads = graph_backward(ctx, g)
    for parent, pgrad, needed in zip(ctx.parents, parent_grads, ctx.needs_input_grad):
        if not needed or pgrad is None:
            continue
        if pgrad.shape != parent.shape:
            raise RuntimeError(f"{ctx.name}'s graph backward returned a gradient of shape "
                               f"{pgrad.shape} for an input of shape {parent.shape}")
        previous = grads.get(id(parent))
        grads[id(parent)] = pgrad if previous is None else previous + pgrad


def _result(g, tensor, index, allow_unused, Tensor):
    if g is None:
        if allow_unused:
            return None
        raise RuntimeError(f"autograd.grad: input {index} (shape {tensor.shape}) was not used "
                           "to compute the outputs; pass allow_unused=True to get None for it")
    if isinstance(g, Tensor):
        return g
    return Tensor._make(np.array(g, dtype=tensor.data.dtype, copy=True), False, None)
