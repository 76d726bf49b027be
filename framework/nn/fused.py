"""Float fused modules: a conv (or linear) followed by BN and/or an activation, as one module.

`tianyuan.quantization.fuse` puts them in place of a group of layers (the first layer of
the group becomes the fused module, the others `Identity`); in float they run their
parts in order. Their names are the parts' short names, so the QAT and int8 twins in
`nn.qat` and `nn.quantized` are found by name: Conv2d + BatchNorm2d + ReLU6 ->
``ConvBnReLU62d``.

>>> fused = ConvBnReLU2d(Conv2d(3, 8, 3), BatchNorm2d(8), ReLU())
"""
from .container import Sequential

SHORT_NAMES = {"Conv2d": "Conv", "BatchNorm2d": "Bn", "ReLU": "ReLU", "ReLU6": "ReLU6",
               "Linear": "Linear"}


def fused_name(names):
    """Class names ['Conv2d', 'BatchNorm2d', 'ReLU'] -> 'ConvBnReLU2d'; ['Linear', 'ReLU'] ->
    'LinearReLU'."""
    if len(names) == 1:
        return names[0]
    if any(n not in SHORT_NAMES for n in names):
        raise ValueError(f"fuse: cannot fuse {names}; fusible parts are {sorted(SHORT_NAMES)}")
    suffix = "2d" if names[0] == "Conv2d" else ""
    return "".join(SHORT_NAMES[n] for n in names) + suffix


class Fused(Sequential):
    """Children 0 (conv/linear), then 1, 2 (BN and/or activation), run in order."""

    parts = ()

    def __init__(self, *modules):
        got = tuple(type(m).__name__ for m in modules)
        if got != self.parts:
            raise TypeError(f"{type(self).__name__}: expected modules {self.parts}, got {got}")
        super().__init__(*modules)


def _fused_class(*parts):
    name = fused_name(parts)
    return type(name, (Fused,), {"parts": parts, "__doc__": " + ".join(parts) + " (float)."})


ConvBn2d = _fused_class("Conv2d", "BatchNorm2d")
ConvBnReLU2d = _fused_class("Conv2d", "BatchNorm2d", "ReLU")
ConvBnReLU62d = _fused_class("Conv2d", "BatchNorm2d", "ReLU6")
ConvReLU2d = _fused_class("Conv2d", "ReLU")
ConvReLU62d = _fused_class("Conv2d", "ReLU6")
LinearReLU = _fused_class("Linear", "ReLU")
