// pybind11 glue: depthwise convolution (framework/csrc/depthwise/depthwise.h).
#include <string>
#include <tuple>

#include "depthwise/depthwise.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
namespace {

// w must be (C, 1, kh, kw) for an input of C channels.
void check_weight(const char* op, const py::array& w, int64_t c) {
    if (w.ndim() != 4 || w.shape(0) != c || w.shape(1) != 1)
        throw py::value_error(std::string(op) + ": weight must be (" + std::to_string(c) +
                              ", 1, kh, kw), got " + shape_str(w));
}

template <typename T>
py::array forward_typed(const py::array& x_any, const py::array& w_any, const py::object& b_any,
                        Pair stride, Quad padding, Pair dilation) {
    const char* op = "depthwise_conv2d";
    Array<T> x = Array<T>::ensure(x_any), w = Array<T>::ensure(w_any);
    if (x.ndim() != 4) throw py::value_error(std::string(op) + ": x must be (N, C, H, W), got " +
                                             shape_str(x));
    check_weight(op, w, x.shape(1));
    Array<T> b;
    if (!b_any.is_none()) {
        b = Array<T>::ensure(b_any);
        if (b.ndim() != 1 || b.shape(0) != x.shape(1))
            throw py::value_error(std::string(op) + ": bias must be (C,), got " + shape_str(b));
    }
    const Conv2dGeometry g = make_geometry(op, dims_of(x), {w.shape(2), w.shape(3)}, stride,
                                           padding, dilation);
    Array<T> out({g.n, g.c, g.out_h(), g.out_w()});
    const T* bias = b_any.is_none() ? nullptr : b.data();
    py::gil_scoped_release release;
    depthwise_conv2d_forward<T>(x.data(), w.data(), bias, g, out.mutable_data());
    return std::move(out);
}

template <typename T>
py::array backward_input_typed(const py::array& gy_any, const py::array& w_any, Quad shape,
                               Pair stride, Quad padding, Pair dilation) {
    const char* op = "depthwise_conv2d_backward_input";
    Array<T> gy = Array<T>::ensure(gy_any), w = Array<T>::ensure(w_any);
    auto [n, c, h, wd] = shape;
    checked_shape(op, "input_shape", dims_of(shape));
    check_weight(op, w, c);
    const Conv2dGeometry g = make_geometry(op, dims_of(shape), {w.shape(2), w.shape(3)}, stride,
                                           padding, dilation);
    if (gy.ndim() != 4 || gy.shape(0) != n || gy.shape(1) != c || gy.shape(2) != g.out_h() ||
        gy.shape(3) != g.out_w())
        throw py::value_error(std::string(op) + ": grad must be (" + std::to_string(n) + ", " +
                              std::to_string(c) + ", " + std::to_string(g.out_h()) + ", " +
                              std::to_string(g.out_w()) + "), got " + shape_str(gy));
    Array<T> gx({n, c, h, wd});
    py::gil_scoped_release release;
    depthwise_conv2d_backward_input<T>(gy.data(), w.data(), g, gx.mutable_data());
    return std::move(gx);
}

template <typename T>
py::array backward_weight_typed(const py::array& x_any, const py::array& gy_any, Pair kernel,
                                Pair stride, Quad padding, Pair dilation) {
    const char* op = "depthwise_conv2d_backward_weight";
    Array<T> x = Array<T>::ensure(x_any), gy = Array<T>::ensure(gy_any);
    if (x.ndim() != 4) throw py::value_error(std::string(op) + ": x must be (N, C, H, W), got " +
                                             shape_str(x));
    const Conv2dGeometry g = make_geometry(op, dims_of(x), kernel, stride, padding, dilation);
    if (gy.ndim() != 4 || gy.shape(0) != g.n || gy.shape(1) != g.c ||
        gy.shape(2) != g.out_h() || gy.shape(3) != g.out_w())
        throw py::value_error(std::string(op) + ": grad " + shape_str(gy) +
                              " does not match the output of input " + shape_str(x));
    Array<T> gw({g.c, int64_t(1), g.kh, g.kw});
    py::gil_scoped_release release;
    depthwise_conv2d_backward_weight<T>(x.data(), gy.data(), g, gw.mutable_data());
    return std::move(gw);
}

}  // namespace

void bind_depthwise(py::module_& m) {
    m.def("depthwise_conv2d", [](const py::array& x, const py::array& w, const py::object& b,
                                 Pair stride, Quad padding, Pair dilation) {
        return dispatch_float("depthwise_conv2d", "x", x,
            [&] { return forward_typed<float>(x, w, b, stride, padding, dilation); },
            [&] { return forward_typed<double>(x, w, b, stride, padding, dilation); });
    }, py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
       py::arg("dilation"), "x (N, C, H, W), w (C, 1, kh, kw), bias (C,) or None -> "
       "(N, C, out_h, out_w); padding (top, bottom, left, right)");
    m.def("depthwise_conv2d_backward_input", [](const py::array& gy, const py::array& w,
                                                Quad shape, Pair stride, Quad padding,
                                                Pair dilation) {
        return dispatch_float("depthwise_conv2d_backward_input", "grad", gy,
            [&] { return backward_input_typed<float>(gy, w, shape, stride, padding, dilation); },
            [&] { return backward_input_typed<double>(gy, w, shape, stride, padding, dilation); });
    }, py::arg("grad"), py::arg("w"), py::arg("input_shape"), py::arg("stride"),
       py::arg("padding"), py::arg("dilation"), "grad (N, C, out_h, out_w) -> (N, C, H, W)");
    m.def("depthwise_conv2d_backward_weight", [](const py::array& x, const py::array& gy,
                                                 Pair kernel, Pair stride, Quad padding,
                                                 Pair dilation) {
        return dispatch_float("depthwise_conv2d_backward_weight", "x", x,
            [&] { return backward_weight_typed<float>(x, gy, kernel, stride, padding, dilation); },
            [&] {
                return backward_weight_typed<double>(x, gy, kernel, stride, padding, dilation);
            });
    }, py::arg("x"), py::arg("grad"), py::arg("kernel"), py::arg("stride"), py::arg("padding"),
       py::arg("dilation"), "x (N, C, H, W), grad (N, C, out_h, out_w) -> gw (C, 1, kh, kw)");
}

}  // namespace bind
}  // namespace tianyuan
