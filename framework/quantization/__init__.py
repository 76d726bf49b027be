"""tianyuan.quantization: train with quantization in mind, then run the model as int8.

The five steps (see /DESIGN.md, Quantization):

>>> from tianyuan import quantization as Q
>>> qat = Q.quantize_qat(model, Q.ema_fakequant_qconfig)   # fused QAT modules
>>> ...train qat (QAT), or Q.calibrate(qat, batches) (post-training)
>>> int8 = Q.quantize(qat)                                  # int8 modules, packed weights
>>> logits = int8(x)                                        # float in, float out

Numbers: weights int8 symmetric per output channel; activations uint8 asymmetric per
tensor (int8 symmetric with `int8_symmetric_qconfig`; weights on 7 bits, faster on AVX2
without VNNI, with `reduce_range_qconfig` / `calibration_reduce_range_qconfig`); bias int32
at s_in * s_w. The arithmetic is specified by `reference.py` (numpy) and run by `kernels.py`
(native, bit-exact). Quantized activations are Tensors of `QArray` (`qarray.py`).
"""
from . import kernels, reference
from .fake_quant import FakeQuantize, FakeQuantizeSTE, LSQFakeQuantize, LSQFunction
from .histogram import HistogramObserver
from .observer import (MinMaxObserver, MovingAverageMinMaxObserver, Observer, QParams,
                       make_weight_observer, qparams_from_range)
from .qarray import QArray, dequantize_tensor, is_quantized, quantized_tensor
from .qconfig import (FAKE_QUANTIZERS, OBSERVERS, QCONFIGS, QConfig, calibration_qconfig,
                      calibration_reduce_range_qconfig, ema_fakequant_qconfig, get_qconfig,
                      int8_symmetric_qconfig, lsq_qconfig, min_max_fakequant_qconfig,
                      reduce_range_qconfig, register_fake_quantizer, register_observer,
                      register_qconfig)
from .quantize import (calibrate, carries_channels_last, disable_fake_quant, disable_observer,
                       disable_quantize, enable_fake_quant, enable_observer, fuse, quantize,
                       quantize_qat, sequential_groups)
