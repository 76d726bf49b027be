"""tianyuan.quantization: int8 numbers (reference.py, the spec) and native kernels (kernels.py).

Observers, fake quantizers, QConfig and the quantize_qat/quantize flow build on these.
"""
from . import kernels, reference
