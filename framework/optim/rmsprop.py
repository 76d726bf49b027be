"""RMSprop (Hinton's lecture 6e; centered form from Graves 2013), as PyTorch updates it.

    g = grad + weight_decay * p
    s = alpha * s + (1 - alpha) * g * g
    a = alpha * a + (1 - alpha) * g             (centered only)
    r = sqrt(s - a * a) + eps if centered else sqrt(s) + eps
    buf = momentum * buf + g / r;  p = p - lr * buf   (momentum > 0)
    p = p - lr * g / r                                 (momentum = 0)

>>> opt = RMSprop(params, lr=0.01, alpha=0.9, momentum=0.9, centered=True)
"""
import numpy as np

from .optimizer import Optimizer
from .sgd import check_nonnegative


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False):
        check_nonnegative("RMSprop", lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                          momentum=momentum)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered))

    def _init_state(self, state, param, group):
        state.update(step=0, square_avg=np.zeros_like(param.data))
        if group["momentum"] > 0:
            state["momentum_buffer"] = np.zeros_like(param.data)
        if group["centered"]:
            state["grad_avg"] = np.zeros_like(param.data)

    def _update(self, param, grad, state, group):
        alpha = group["alpha"]
        if not state:
            self._init_state(state, param, group)
        state["step"] += 1
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * param.data
        square_avg = state["square_avg"]
        square_avg *= alpha
        square_avg += (1.0 - alpha) * grad * grad
        if group["centered"]:
            grad_avg = state["grad_avg"]
            grad_avg += (1.0 - alpha) * (grad - grad_avg)
            avg = np.sqrt(square_avg - grad_avg * grad_avg) + group["eps"]
        else:
            avg = np.sqrt(square_avg) + group["eps"]
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf *= group["momentum"]
            buf += grad / avg
            param.data -= group["lr"] * buf
        else:
            param.data -= group["lr"] * (grad / avg)
