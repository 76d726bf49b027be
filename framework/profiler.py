"""Where eager execution spends its time, by autograd op: forward and backward calls and
milliseconds, each op's own time (an op run inside another op's forward or backward counts
for itself, not twice), and the time no op took (Python between ops, the optimizer).

>>> from tianyuan import profiler
>>> with profiler.profile() as prof:
...     loss = F.cross_entropy(model(x), y)
...     loss.backward()
...     opt.step()
>>> prof.rows()[0]
{'op': 'Conv2d', 'forward_ms': 80.1, 'forward_calls': 20, 'backward_ms': 190.4, ...}
>>> prof.wall_ms, prof.outside_ms

While a profile is open, `Function.apply` and the backward pass's per-node step run timed
twins (swapped in on entry, restored on exit, exceptions included), so code outside a
profile pays nothing. Modules that call native kernels without autograd ops (the int8
modules) show up as outside time.
"""
import contextlib
import time

from . import autograd

_active = [None]


class Profile:
    """Times gathered by `profile()`; read them after the block."""

    def __init__(self):
        self.stats = {}          # (op, "forward" | "backward") -> [calls, seconds]
        self.wall_ms = 0.0
        self._inner = [0.0]      # per open op: seconds its nested ops took

    def _timed(self, op, phase, fn, *args, **kwargs):
        self._inner.append(0.0)
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            nested = self._inner.pop()
            self._inner[-1] += elapsed
            entry = self.stats.setdefault((op, phase), [0, 0.0])
            entry[0] += 1
            entry[1] += elapsed - nested

    @property
    def ops_ms(self):
        return 1000.0 * sum(seconds for _, seconds in self.stats.values())

    @property
    def outside_ms(self):
        """The block's wall time that no op took."""
        return self.wall_ms - self.ops_ms

    def rows(self):
        """One dict per op, most time first: forward_ms, forward_calls, backward_ms,
        backward_calls, total_ms and share (of the block's wall time)."""
        names = sorted({op for op, _ in self.stats})
        rows = []
        for op in names:
            f_calls, f_s = self.stats.get((op, "forward"), (0, 0.0))
            b_calls, b_s = self.stats.get((op, "backward"), (0, 0.0))
            total = 1000.0 * (f_s + b_s)
            rows.append({"op": op, "forward_ms": round(1000.0 * f_s, 3), "forward_calls": f_calls,
                         "backward_ms": round(1000.0 * b_s, 3), "backward_calls": b_calls,
                         "total_ms": round(total, 3),
                         "share": round(total / self.wall_ms, 4) if self.wall_ms else 0.0})
        return sorted(rows, key=lambda row: -row["total_ms"])


@contextlib.contextmanager
def profile():
    """Times every autograd op run inside the block; yields a `Profile`."""
    if _active[0] is not None:
        raise RuntimeError("profiler.profile: a profile is already open; nest none")
    prof = Profile()
    apply, propagate, accumulate = (autograd.Function.__dict__["apply"], autograd._propagate,
                                    autograd._accumulate)

    def timed_apply(cls, *tensors, **kwargs):
        return prof._timed(cls.__name__, "forward", apply.__func__, cls, *tensors, **kwargs)

    def timed_propagate(node, grad, grads, retain_graph):
        return prof._timed(node._ctx.name, "backward", propagate, node, grad, grads,
                           retain_graph)

    def timed_accumulate(tensor, grad):
        return prof._timed("accumulate_grad", "backward", accumulate, tensor, grad)

    _active[0] = prof
    autograd.Function.apply = classmethod(timed_apply)
    autograd._propagate, autograd._accumulate = timed_propagate, timed_accumulate
    start = time.perf_counter()
    try:
        yield prof
    finally:
        prof.wall_ms = 1000.0 * (time.perf_counter() - start)
        autograd.Function.apply = apply
        autograd._propagate, autograd._accumulate = propagate, accumulate
        _active[0] = None
