"""QAT quantization points: each fake-quantizes its output with its own observer
(DequantStub, the end of the int8 region, has none)."""
import numpy as np

from ... import functional as F
from ...quantization import reference as R
from ...tensor import Tensor
from .. import quant_points as float_points
from .module import QATModule


class QuantStub(float_points.QuantStub, QATModule):
    with_weight = False

    def forward(self, x):
        return self.fake_quant_act(x)


class DequantStub(float_points.DequantStub, QATModule):
    with_weight = False

    def attach_quantizers(self, qconfig):
        self.qconfig = qconfig


class Add(float_points.Add, QATModule):
    """In eval, the int8 add's integers (module.py's docstring): both inputs requantized to the
    output scale with one shared shift (reference.add)."""
    with_weight = False
    relu = False

    def forward(self, a, b):
        grids = self.int8_grids(a, b)
        if grids is None or np.dtype(grids[0].dtype) != np.dtype(grids[1].dtype):
            return self.float_forward(a, b)
        (pa, pb), p = grids, self.act_qparams()
        sa, sb, s_out = (np.float32(g.scale) for g in (pa, pb, p))
        qa, qb = (R.quantize(t.data, np.float32(g.scale), g.zero_point, g.dtype)
                  for t, g in ((a, pa), (b, pb)))
        q = R.add(qa, int(pa.zero_point), qb, int(pb.zero_point),
                  *R.add_multipliers(sa, sb, s_out), int(p.zero_point), self.relu, p.dtype)
        return self.int8_output(q, p, self.float_forward(a, b) if self.wants_grad(a, b)
                                else None)

    def float_forward(self, a, b):
        y = a + b
        return self.fake_quant_act(F.relu(y) if self.relu else y)


class AddReLU(Add, float_points.AddReLU):
    relu = True


class Concat(float_points.Concat, QATModule):
    """In eval, the int8 concat's integers: each part requantized to the output grid
    (reference.concat), then joined (and shuffled) as the float parts are."""
    with_weight = False

    def forward(self, tensors):
        grids = self.int8_grids(*tensors)
        if grids is None or len({np.dtype(g.dtype) for g in grids}) != 1:
            return self.fake_quant_act(self.join(tensors))
        p = self.act_qparams()
        s_out, zp = np.float32(p.scale), int(p.zero_point)
        parts = []
        for t, g in zip(tensors, grids):
            m, shift = R.quantize_multiplier(np.float64(np.float32(g.scale)) / np.float64(s_out))
            q = R.concat([R.quantize(t.data, np.float32(g.scale), g.zero_point, g.dtype)],
                         [int(g.zero_point)], m, shift, zp, p.dtype)
            parts.append(Tensor(R.dequantize(q, s_out, zp)))
        joined = self.join(parts)      # moves values only: they stay on the output grid
        q = R.quantize(joined.data, s_out, zp, p.dtype)
        wanted = self.wants_grad(*tensors)
        return self.int8_output(q, p, self.fake_quant_act(self.join(tensors)) if wanted
                                else None)
