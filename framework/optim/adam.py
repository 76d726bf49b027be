"""Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), as PyTorch updates them.

    g = grad + weight_decay * p      (Adam: L2 folded into the gradient)
    p = p * (1 - lr * weight_decay)  (AdamW: decoupled decay, before the step)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    v_hat = max(v_hat, v) if amsgrad else v
    p = p - lr / (1 - beta1**t) * m / (sqrt(v_hat) / sqrt(1 - beta2**t) + eps)

>>> opt = AdamW(params, lr=1e-3, betas=(0.9, 0.999), weight_decay=0.05)
"""
import math

import numpy as np

from .. import _C
from .optimizer import Optimizer
from .sgd import _native, check_nonnegative


class Adam(Optimizer):
    decoupled = False  # AdamW decays the weights directly instead of the gradient

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False):
        name = type(self).__name__
        check_nonnegative(name, lr=lr, eps=eps, weight_decay=weight_decay)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"{name}: betas must be two numbers in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad))

    def _update(self, param, grad, state, group):
        beta1, beta2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        if not state:
            state.update(step=0, exp_avg=np.zeros_like(param.data),
                         exp_avg_sq=np.zeros_like(param.data))
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = np.zeros_like(param.data)
        state["step"] += 1
        m, v = state["exp_avg"], state["exp_avg_sq"]
        scalars = (lr, beta1, beta2, group["eps"], wd)
        if not group["amsgrad"] and _native(param.data, grad, m, v) and all(
                type(x) in (float, int) for x in scalars):  # numpy scalars may widen
            # one pass on every core, the same bits as the numpy below (optim.h)
            _C.adam_update(param.data, grad, m, v, state["step"], lr, beta1, beta2,
                           group["eps"], wd, self.decoupled)
            return
        if wd and self.decoupled:
            param.data *= 1.0 - lr * wd
        elif wd:
            grad = grad + wd * param.data
        m += (1.0 - beta1) * (grad - m)  # m = beta1 * m + (1 - beta1) * g, as a lerp
        v *= beta2
        v += (1.0 - beta2) * grad * grad
        if group["amsgrad"]:
            np.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
            v = state["max_exp_avg_sq"]
        step = state["step"]
        denom = np.sqrt(v) / math.sqrt(1.0 - beta2 ** step) + group["eps"]
        param.data -= (lr / (1.0 - beta1 ** step)) * m / denom


class AdamW(Adam):
    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
