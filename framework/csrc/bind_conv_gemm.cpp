// pybind11 glue: the direct GEMM convolution with its fused epilogue (framework/csrc/conv_gemm.h).
#include <string>

#include "conv_gemm.h"

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
                      int act) {
    if (!x_any.dtype().is(py::dtype::of<float>()) || !w_any.dtype().is(py::dtype::of<float>()))
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
    const Conv2dGeometry g = make_geometry("conv2d_gemm", x.shape(0), x.shape(1), x.shape(2),
                                           x.shape(3), {w.shape(2), w.shape(3)}, stride,
                                           padding, dilation);
    F32 out({g.n, co, g.out_h(), g.out_w()});
    {
        py::gil_scoped_release release;
        conv_gemm_forward(x.data(), w.data(), co, g, epi, out.mutable_data());
    }
    return std::move(out);
}

}  // namespace

void bind_conv_gemm(py::module_& m) {
    m.def("conv2d_gemm", &conv2d_gemm, py::arg("x"), py::arg("w"), py::arg("scale"),
          py::arg("shift"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
          py::arg("act") = 0,
          "act(scale * conv2d(x, w) + shift) per output channel, groups 1, float32; scale and "
          "shift (Co,) or None; act 0 none, 1 ReLU, 2 ReLU6; padding (top, bottom, left, right)");
}

}  // namespace bind
}  // namespace tianyuan
