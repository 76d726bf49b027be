"""A quantized array read from a foreign file: integer values plus their scale and zero point.

PyTorch stores quantized tensors (`_rebuild_qtensor`) and MegEngine stores int8 arrays
whose dtype metadata carries the scale; both become a QTensor here. `flatten_qtensors`
turns a state dict holding them into plain arrays for safetensors:
`name` (the integers), `name.scale`, `name.zero_point` (float64 / int64 arrays, one per
channel when per-channel) and `name.axis` (int64 scalar, -1 when per-tensor).
"""
from dataclasses import dataclass

import numpy as np


@dataclass
class QTensor:
    values: np.ndarray          # int8 / uint8 / int32, the stored integers
    scale: np.ndarray           # float64, () per tensor or (C,) per channel
    zero_point: np.ndarray      # int64, same shape as scale
    axis: int = -1              # the channel axis when per-channel, else -1
    dtype: str = "qint8"        # qint8 | quint8 | qint32 (the source's name)

    @property
    def shape(self):
        return self.values.shape

    def dequantize(self):
        """float32 values: (q - zero_point) * scale, broadcast along `axis`."""
        scale, zero = self.scale, self.zero_point
        if self.axis >= 0:
            view = [1] * self.values.ndim
            view[self.axis] = -1
            scale, zero = scale.reshape(view), zero.reshape(view)
        return ((self.values.astype(np.float64) - zero) * scale).astype(np.float32)


def bfloat16_to_float32(bits):
    """bfloat16 bit patterns (uint16) to float32: they are the float32's top 16 bits."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def flatten_qtensors(state):
    """{name: array | QTensor | tuple} -> {name: array}; see the module docstring."""
    flat = {}
    for name, value in state.items():
        if isinstance(value, QTensor):
            flat[name] = value.values
            flat[name + ".scale"] = np.asarray(value.scale, np.float64)
            flat[name + ".zero_point"] = np.asarray(value.zero_point, np.int64)
            flat[name + ".axis"] = np.asarray(value.axis, np.int64)
        elif isinstance(value, (tuple, list)):  # quantized Linear's (weight, bias) pair
            parts = {f"{name}.{i}": v for i, v in enumerate(value) if v is not None}
            flat.update(flatten_qtensors(parts))
        elif isinstance(value, np.ndarray):
            flat[name] = value
        elif isinstance(value, (int, float, bool, np.generic)):
            flat[name] = np.asarray(value)
        # other entries (dtype singletons, strings) carry no weights
    return flat
