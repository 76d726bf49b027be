// pybind11 glue: the direct GEMM convolution with its fused epilogue (framework/csrc/conv/conv_gemm.h).
#include <string>

#include "conv/conv_gemm.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
namespace {

using F32 = Array<float>;

// A per-channel vector (Co,) or null; errors name the argument.
const float* channel_vector(const py::object& v, int64_t co, const char* name, F32* keep) {
    if (v.is_none()) return nullptr;
    *keep = F32::ensure(v);
    if (!*keep || keep->ndim() != 1 || keep->shape(0) != co)
        throw py::value_error(std::string("conv2d_gemm: ") + name + " must be (" +
                              std::to_string(co) + ",) float32");
    return keep->data();
}

py::array conv2d_gemm(const py::array& x_any, const py::array& w_any, const py::object& scale,
                      const py::object& shift, Pair stride, Quad padding, Pair dilation,
                      int act, const std::string& plan_name) {
    ConvGemmPlan plan = ConvGemmPlan::automatic;
    if (plan_name == "slab") plan = ConvGemmPlan::slab;
    else if (plan_name == "stream") plan = ConvGemmPlan::stream;
    else if (plan_name == "few") plan = ConvGemmPlan::few;
    else if (plan_name != "auto")
        throw py::value_error("conv2d_gemm: plan must be 'auto', 'slab', 'stream' or 'few', "
                              "got '" + plan_name + "'");
    if (!has_dtype<float>(x_any) || !has_dtype<float>(w_any))
        throw py::value_error("conv2d_gemm: x and w must be float32");
    F32 x = F32::ensure(x_any), w = F32::ensure(w_any);
    if (x.ndim() != 4 || w.ndim() != 4 || w.shape(1) != x.shape(1))
        throw py::value_error("conv2d_gemm: need x (N, C, H, W) and w (Co, C, kh, kw) with the "
                              "same C (groups == 1)");
    if (act < 0 || act > 2) throw py::value_error("conv2d_gemm: act must be 0, 1 or 2");
    const int64_t co = w.shape(0);
    F32 scale_arr, shift_arr;
    const ConvEpilogue epi{channel_vector(scale, co, "scale", &scale_arr),
                           channel_vector(shift, co, "shift", &shift_arr), act};
    const Conv2dGeometry g = make_geometry("conv2d_gemm", dims_of(x), {w.shape(2), w.shape(3)},
                                           stride, padding, dilation);
    F32 out({g.n, co, g.out_h(), g.out_w()});
    {
        py::gil_scoped_release release;
        conv_gemm_forward(x.data(), w.data(), co, g, epi, out.mutable_data(), plan);
    }
    return std::move(out);
}

py::array conv2d_gemm_weight_grad(const py::array& x_any, const py::array& gy_any, Pair kernel,
                                  Pair stride, Quad padding, Pair dilation) {
    if (!has_dtype<float>(x_any) || !has_dtype<float>(gy_any))
        throw py::value_error("conv2d_gemm_weight_grad: x and gy must be float32");
    F32 x = F32::ensure(x_any), gy = F32::ensure(gy_any);
    if (x.ndim() != 4 || gy.ndim() != 4)
        throw py::value_error("conv2d_gemm_weight_grad: need x (N, C, H, W) and gy (N, Co, "
                              "out_h, out_w)");
    const Conv2dGeometry g = make_geometry("conv2d_gemm_weight_grad", dims_of(x), kernel,
                                           stride, padding, dilation);
    if (gy.shape(0) != g.n || gy.shape(2) != g.out_h() || gy.shape(3) != g.out_w())
        throw py::value_error("conv2d_gemm_weight_grad: gy must be (" + std::to_string(g.n) +
                              ", Co, " + std::to_string(g.out_h()) + ", " +
                              std::to_string(g.out_w()) + ") for this x and geometry, got (" +
                              std::to_string(gy.shape(0)) + ", " + std::to_string(gy.shape(1)) +
                              ", " + std::to_string(gy.shape(2)) + ", " +
                              std::to_string(gy.shape(3)) + ")");
    const int64_t co = gy.shape(1);
    F32 gw({co, g.c, g.kh, g.kw});
    {
        py::gil_scoped_release release;
        conv_gemm_weight_grad(x.data(), gy.data(), co, g, gw.mutable_data());
    }
    return std::move(gw);
}

}  // namespace

void bind_conv_gemm(py::module_& m) {
    testing_of(m).def("fma_peak", &fma_peak, py::arg("steps"), py::call_guard<py::gil_scoped_release>(),
          "float32 operations per second of a register-only FMA loop (steps x 12 "
          "instructions on every thread, zmm from avx512 up, else ymm): the fp32 peak; "
          "RuntimeError below AVX2");
    m.def("conv2d_gemm", &conv2d_gemm, py::arg("x"), py::arg("w"), py::arg("scale"),
          py::arg("shift"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
          py::arg("act") = 0, py::arg("plan") = "auto",
          "act(scale * conv2d(x, w) + shift) per output channel, groups 1, float32; scale and "
          "shift (Co,) or None; act 0 none, 1 ReLU, 2 ReLU6; padding (top, bottom, left, right);"
          " plan: 'auto' (by shape) or 'slab', 'stream', 'few' (conv_gemm.h; for tests and "
          "benchmarks: every plan gives the same bits)");
    m.def("conv2d_gemm_weight_grad", &conv2d_gemm_weight_grad, py::arg("x"), py::arg("gy"),
          py::arg("kernel"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
          "Weight gradient (Co, C, kh, kw) of conv2d(x, w) (groups 1, float32) for output "
          "gradient gy, no im2col matrix; padding (top, bottom, left, right)");
}

}  // namespace bind
}  // namespace tianyuan
