"""Parameter: a Tensor that a Module registers as learnable (requires_grad=True)."""
import numpy as np

from ..tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor that `Module.__setattr__` registers; shares `data`'s array where it can.

    >>> import tianyuan as ty
    >>> w = Parameter(ty.zeros(3, 2))
    >>> w.requires_grad
    True
    """

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = np.zeros((0,), np.float32)
        super().__init__(data, requires_grad=requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()
