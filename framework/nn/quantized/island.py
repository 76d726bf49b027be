"""The int8 side of a float layer kept between int8 ones (nn.qat.island.FloatIsland)."""
from ...quantization.qarray import dequantize_tensor, is_quantized, quantized_tensor
from .module import QuantizedModule


class FloatIsland(QuantizedModule):
    """int8 in -> dequantize -> the float layer -> int8 out at the scale QAT observed;
    float in -> the float layer -> float out."""

    @classmethod
    def from_qat(cls, qat):
        island = cls()
        island.module = qat.module
        island.set_output(qat.act_qparams())
        return island

    def forward(self, *args):
        if not any(is_quantized(a) for a in args):
            return self.module(*args)
        out = self.module(*[dequantize_tensor(a) for a in args])
        scale, zero_point = self.output()
        return quantized_tensor(out, scale, zero_point, self.out_dtype)
