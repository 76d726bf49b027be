"""Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay.

The update is PyTorch's (Sutskever et al. 2013 momentum, applied to the gradient):

    d = g + weight_decay * p
    buf = d                                   (first step)
    buf = momentum * buf + (1 - dampening) * d  (later steps)
    d = d + momentum * buf if nesterov else buf
    p = p - lr * d

>>> opt = SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4, nesterov=True)
"""
import numpy as np

from .. import _C
from .optimizer import Optimizer, required


def check_nonnegative(where, **values):
    for name, value in values.items():
        if not value >= 0.0:
            raise ValueError(f"{where}: {name} must be >= 0, got {value}")


def _native(*arrays):
    """float32, C-contiguous arrays of one shape: the native update's domain."""
    return all(a.dtype == np.float32 and a.flags.c_contiguous and a.shape == arrays[0].shape
               for a in arrays)


class SGD(Optimizer):
    def __init__(self, params, lr=required(), momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        if lr is not required():
            check_nonnegative("SGD", lr=lr)
        check_nonnegative("SGD", momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError(f"SGD: nesterov needs momentum > 0 and dampening = 0, got "
                             f"momentum={momentum}, dampening={dampening}")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def _update(self, param, grad, state, group):
        momentum = group["momentum"]
        buf = state.get("momentum_buffer")
        scalars = (group["lr"], momentum, group["dampening"], group["weight_decay"])
        if momentum and buf is not None and _native(param.data, grad, buf) and all(
                type(v) in (float, int) for v in scalars):  # numpy scalars may widen
            # one pass on every core, the same bits as the numpy below (optim.h)
            _C.sgd_momentum_update(param.data, grad, buf, group["lr"], momentum,
                                   group["dampening"], group["weight_decay"], group["nesterov"])
            return
        d = grad + group["weight_decay"] * param.data if group["weight_decay"] else grad
        if momentum:
            if buf is None:
                buf = state["momentum_buffer"] = np.array(d, copy=True)
            else:
                buf *= momentum
                # the same bits as (1 - 0) * d without its temporary (one pass fewer)
                buf += (1.0 - group["dampening"]) * d if group["dampening"] else d
            d = d + momentum * buf if group["nesterov"] else buf
        param.data -= group["lr"] * d
