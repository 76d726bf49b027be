// pybind11 glue: fake quantization for quantization-aware training (int8_ops.h's
// fake_quantize and lsq_scale_grad; their numpy twins in quantization/fake_quant.py).
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "int8_gemm/int8_ops.h"

#include "int8_gemm/bind_int8_common.h"

namespace tianyuan {
namespace bind {
namespace {

// x's values as (outer, C, inner) rows around `axis` (-1: per tensor, C = 1), and the
// per-channel vectors' length C; `what` names them in the error.
int8::FakeQuantRows rows_around(const char* op, const Array<float>& x, int axis,
                                const char* what, int64_t got) {
    const int64_t ndim = x.ndim();
    if (axis < -1 || axis >= ndim)
        throw std::invalid_argument(std::string(op) + ": axis must be -1 (per tensor) or in [0, " +
                                    std::to_string(ndim) + ") for x " + shape_str(x) + ", got " +
                                    std::to_string(axis));
    int64_t outer = 1, c = 1, inner = 1;
    for (int64_t d = 0; d < ndim; ++d)
        (axis < 0 || d > axis ? inner : d < axis ? outer : c) *= x.shape(d);
    if (got != c)
        throw std::invalid_argument(
            std::string(op) + ": " + what + " must have " + std::to_string(c) + " values (" +
            (axis < 0 ? std::string("per tensor") : "x.shape[" + std::to_string(axis) + "]") +
            " of x " + shape_str(x) + "), got " + std::to_string(got));
    return {x.data(), outer, c, inner, nullptr, nullptr, 0, 0};
}

}  // namespace

void bind_fake_quant(py::module_& m) {
    m.def("fake_quantize", [](const Array<float>& x, const Array<float>& scale,
                              const Array<int32_t>& zp, int axis, bool out_signed) {
        const char* op = "fake_quantize";
        if (zp.size() != scale.size())
            throw std::invalid_argument("fake_quantize: scale and zero_point differ in length, " +
                                        std::to_string(scale.size()) + " and " +
                                        std::to_string(zp.size()));
        int8::FakeQuantRows f = rows_around(op, x, axis, "scale and zero_point", scale.size());
        for (int64_t i = 0; i < f.c; ++i) {
            if (!(scale.data()[i] > 0.0f) || !std::isfinite(scale.data()[i]))
                throw std::invalid_argument("fake_quantize: scales must be positive and finite, "
                                            "got " + std::to_string(scale.data()[i]) +
                                            " at " + std::to_string(i));
        }
        f.scale = scale.data();
        f.zp = zp.data();
        f.lo = out_signed ? -128 : 0;
        f.hi = out_signed ? 127 : 255;
        std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
        py::array_t<float> y(shape);
        py::array_t<bool> inside(shape);
        float* yd = y.mutable_data();
        auto* id = reinterpret_cast<uint8_t*>(inside.mutable_data());
        {
            py::gil_scoped_release unlocked;
            int8::fake_quantize(f, yd, id);
        }
        return py::make_tuple(y, inside);
    }, "float32 x -> (dequantize(quantize(x)), inside mask): per tensor (axis -1, one scale) "
       "or per channel along axis");
    m.def("lsq_scale_grad", [](const Array<float>& g, const Array<float>& x,
                               const Array<float>& y, const py::array_t<bool>& inside,
                               const Array<float>& scale, int axis) {
        const char* op = "lsq_scale_grad";
        for (const py::array* a : {static_cast<const py::array*>(&g),
                                   static_cast<const py::array*>(&y),
                                   static_cast<const py::array*>(&inside)}) {
            if (shape_str(*a) != shape_str(x) || !(a->flags() & py::array::c_style))
                throw std::invalid_argument("lsq_scale_grad: g, y and inside must be contiguous "
                                            "and of x's shape " + shape_str(x) + ", got " +
                                            shape_str(*a));
        }
        int8::FakeQuantRows f = rows_around(op, x, axis, "scale", scale.size());
        f.scale = scale.data();
        Array<double> ds(f.c);
        const auto* in = reinterpret_cast<const uint8_t*>(inside.data());
        double* out = ds.mutable_data();
        {
            py::gil_scoped_release unlocked;
            int8::lsq_scale_grad(f, g.data(), y.data(), in, out);
        }
        return ds;
    }, "LSQ's scale gradient per channel (before its gradient scale): float32 in, float64 sums");
}

}  // namespace bind
}  // namespace tianyuan
