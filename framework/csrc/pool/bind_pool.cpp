// pybind11 glue: max, average and adaptive average pooling (framework/csrc/pool/pool.h).
#include <algorithm>
#include <string>
#include <tuple>

#include "pool/pool.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
namespace {

// Checked (window_2d's rules with PyTorch's padding of at most half the kernel; out_size its
// floor or ceil_mode size); errors name `op`.
Pool2dGeometry max_geometry(const char* op, const py::array& x, Pair kernel, Pair stride,
                            Pair padding, Pair dilation, Pair out_size) {
    if (x.ndim() != 4) throw py::value_error(std::string(op) + ": x must be 4-D (N, C, H, W), " +
                                             "got " + shape_str(x));
    check_pool_out(op, dims_of(x), kernel, stride, padding, dilation, out_size);
    return {x.shape(0), x.shape(1), x.shape(2), x.shape(3), kernel.first, kernel.second,
            stride.first, stride.second, padding.first, padding.second, dilation.first,
            dilation.second, out_size.first, out_size.second};
}

template <typename T>
py::tuple max_pool2d_typed(const py::array& x_any, Pair kernel, Pair stride, Pair padding,
                           Pair dilation, Pair out_size) {
    Array<T> x = Array<T>::ensure(x_any);
    const Pool2dGeometry g =
        max_geometry("max_pool2d", x, kernel, stride, padding, dilation, out_size);
    Array<T> out({g.n, g.c, g.out_h, g.out_w});
    Array<int32_t> argmax({g.n, g.c, g.out_h, g.out_w});
    {
        py::gil_scoped_release release;
        max_pool2d_forward<T>(x.data(), g, out.mutable_data(), argmax.mutable_data());
    }
    return py::make_tuple(out, argmax);
}

template <typename T>
py::array max_pool2d_values_typed(const py::array& x_any, Pair kernel, Pair stride,
                                  Pair padding, Pair dilation, Pair out_size) {
    Array<T> x = Array<T>::ensure(x_any);
    const Pool2dGeometry g =
        max_geometry("max_pool2d_values", x, kernel, stride, padding, dilation, out_size);
    Array<T> out({g.n, g.c, g.out_h, g.out_w});
    py::gil_scoped_release release;
    max_pool2d_values<T>(x.data(), g, out.mutable_data());
    return std::move(out);
}

template <typename T>
py::array max_pool2d_backward_typed(const py::array& grad_any, const py::array& argmax_any,
                                    std::tuple<int64_t, int64_t, int64_t, int64_t> shape) {
    Array<T> grad = Array<T>::ensure(grad_any);
    Array<int32_t> argmax = Array<int32_t>::ensure(argmax_any);
    auto [n, c, h, w] = shape;
    checked_shape("max_pool2d_backward", "input_shape", dims_of(shape));
    check_plane("max_pool2d_backward", "the input plane", h, w);
    if (grad.ndim() != 4 || grad.shape(0) != n || grad.shape(1) != c)
        throw py::value_error("max_pool2d_backward: grad must be (N, C, out_h, out_w) with N, C "
                              "of input_shape");
    if (argmax.ndim() != 4 || argmax.size() != grad.size() ||
        !std::equal(grad.shape(), grad.shape() + 4, argmax.shape()))
        throw py::value_error("max_pool2d_backward: argmax must have grad's shape");
    const Pool2dGeometry g{n, c, h, w, 1, 1, 1, 1, 0, 0, 1, 1, grad.shape(2), grad.shape(3)};
    Array<T> gx({n, c, h, w});
    int64_t outside = 0;
    {
        py::gil_scoped_release release;
        outside = max_pool2d_backward<T>(grad.data(), argmax.data(), g, gx.mutable_data());
    }
    if (outside)
        throw py::value_error("max_pool2d_backward: " + std::to_string(outside) + " argmax "
                              "entries lie outside the (" + std::to_string(h) + ", " +
                              std::to_string(w) + ") plane of input_shape");
    return gx;
}
using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t>;

// Mean pooling geometry, checked as max_geometry's (dilation 1); adaptive when kernel is
// (0, 0): then a non-empty image and out_size, its plane and the kernels' scratch (H x out_w)
// within kMaxPlane. Errors name `op`.
Pool2dGeometry mean_geometry(const char* op, Shape in, Pair kernel, Pair stride, Pair padding,
                             Pair out_size) {
    auto [n, c, h, w] = in;
    const Pool2dGeometry g{n, c, h, w, kernel.first, kernel.second, stride.first, stride.second,
                           padding.first, padding.second, 1, 1, out_size.first, out_size.second};
    checked_shape(op, "input_shape", dims_of(in));
    if (g.kh != 0 || g.kw != 0) {
        check_pool_out(op, dims_of(in), kernel, stride, padding, {1, 1}, out_size);
        return g;
    }
    if (g.h < 1 || g.w < 1 || g.out_h < 1 || g.out_w < 1)
        throw py::value_error(std::string(op) + ": need a non-empty image and out_size >= 1, "
                              "got input " + dims_of(in).str() + ", out_size (" +
                              std::to_string(g.out_h) + ", " + std::to_string(g.out_w) + ")");
    check_plane(op, "out_size", g.out_h, g.out_w);
    check_plane(op, "the input's rows by out_size's columns", g.h, g.out_w);
    return g;
}

template <typename T>
py::array mean_forward_typed(const char* op, const py::array& x_any, Pair kernel, Pair stride,
                             Pair padding, Pair out_size, bool include) {
    Array<T> x = Array<T>::ensure(x_any);
    if (x.ndim() != 4) throw py::value_error(std::string(op) + ": x must be 4-D (N, C, H, W)");
    const Pool2dGeometry g = mean_geometry(op, {x.shape(0), x.shape(1), x.shape(2), x.shape(3)},
                                           kernel, stride, padding, out_size);
    Array<T> out({g.n, g.c, g.out_h, g.out_w});
    py::gil_scoped_release release;
    if (g.kh == 0)
        adaptive_avg_pool2d_forward<T>(x.data(), g, out.mutable_data());
    else
        avg_pool2d_forward<T>(x.data(), g, include, out.mutable_data());
    return std::move(out);
}

template <typename T>
py::array mean_backward_typed(const char* op, const py::array& grad_any, Shape in, Pair kernel,
                              Pair stride, Pair padding, bool include) {
    Array<T> grad = Array<T>::ensure(grad_any);
    if (grad.ndim() != 4 || grad.shape(0) != std::get<0>(in) || grad.shape(1) != std::get<1>(in))
        throw py::value_error(std::string(op) + ": grad must be (N, C, out_h, out_w) with N, C "
                              "of input_shape");
    const Pool2dGeometry g = mean_geometry(op, in, kernel, stride, padding,
                                           {grad.shape(2), grad.shape(3)});
    Array<T> gx({g.n, g.c, g.h, g.w});
    py::gil_scoped_release release;
    if (g.kh == 0)
        adaptive_avg_pool2d_backward<T>(grad.data(), g, gx.mutable_data());
    else
        avg_pool2d_backward<T>(grad.data(), g, include, gx.mutable_data());
    return std::move(gx);
}

// Kernel (0, 0): adaptive.
py::array mean_forward_any(const char* op, const py::array& x, Pair kernel, Pair stride,
                           Pair padding, Pair out_size, bool include) {
    const auto run = [&](auto zero) {
        return mean_forward_typed<decltype(zero)>(op, x, kernel, stride, padding, out_size,
                                                  include);
    };
    return dispatch_float(op, "x", x, [&] { return run(0.0f); }, [&] { return run(0.0); });
}

py::array mean_backward_any(const char* op, const py::array& grad, Shape in, Pair kernel,
                            Pair stride, Pair padding, bool include) {
    const auto run = [&](auto zero) {
        return mean_backward_typed<decltype(zero)>(op, grad, in, kernel, stride, padding,
                                                   include);
    };
    return dispatch_float(op, "grad", grad, [&] { return run(0.0f); }, [&] { return run(0.0); });
}

}  // namespace

void bind_pool(py::module_& m) {
    m.def("avg_pool2d", [](const py::array& x, Pair kernel, Pair stride, Pair padding,
                           Pair out_size, bool include) {
        return mean_forward_any("avg_pool2d", x, kernel, stride, padding, out_size, include);
    }, py::arg("x"), py::arg("kernel"), py::arg("stride"), py::arg("padding"),
       py::arg("out_size"), py::arg("count_include_pad"),
       "x (N, C, H, W) -> window means (N, C, out_h, out_w); padding (top, left)");
    m.def("avg_pool2d_backward", [](const py::array& grad, Shape in, Pair kernel, Pair stride,
                                    Pair padding, bool include) {
        return mean_backward_any("avg_pool2d_backward", grad, in, kernel, stride, padding,
                                 include);
    }, py::arg("grad"), py::arg("input_shape"), py::arg("kernel"), py::arg("stride"),
       py::arg("padding"), py::arg("count_include_pad"),
       "grad (N, C, out_h, out_w) spread over the windows -> (N, C, H, W)");
    m.def("adaptive_avg_pool2d", [](const py::array& x, Pair out_size) {
        return mean_forward_any("adaptive_avg_pool2d", x, {0, 0}, {1, 1}, {0, 0}, out_size, true);
    }, py::arg("x"), py::arg("out_size"), "x (N, C, H, W) -> adaptive means (N, C, oh, ow)");
    m.def("adaptive_avg_pool2d_backward", [](const py::array& grad, Shape in) {
        return mean_backward_any("adaptive_avg_pool2d_backward", grad, in, {0, 0}, {1, 1},
                                 {0, 0}, true);
    }, py::arg("grad"), py::arg("input_shape"), "adjoint of adaptive_avg_pool2d -> (N, C, H, W)");
    m.def("max_pool2d", [](const py::array& x, Pair kernel, Pair stride, Pair padding,
                           Pair dilation, Pair out_size) -> py::tuple {
        if (has_dtype<double>(x))
            return max_pool2d_typed<double>(x, kernel, stride, padding, dilation, out_size);
        if (has_dtype<float>(x))
            return max_pool2d_typed<float>(x, kernel, stride, padding, dilation, out_size);
        throw py::value_error("max_pool2d: x must be float32 or float64, got " +
                              std::string(py::str(x.dtype())));
    }, py::arg("x"), py::arg("kernel"), py::arg("stride"), py::arg("padding"),
       py::arg("dilation"), py::arg("out_size"),
       "x (N, C, H, W) -> (out, argmax int32 flat index in the H*W plane); padding (top, left)");
    m.def("max_pool2d_values", [](const py::array& x, Pair kernel, Pair stride, Pair padding,
                                  Pair dilation, Pair out_size) {
        const auto run = [&](auto zero) {
            return max_pool2d_values_typed<decltype(zero)>(x, kernel, stride, padding, dilation,
                                                           out_size);
        };
        return dispatch_float("max_pool2d", "x", x, [&] { return run(0.0f); },
                              [&] { return run(0.0); });
    }, py::arg("x"), py::arg("kernel"), py::arg("stride"), py::arg("padding"),
       py::arg("dilation"), py::arg("out_size"),
       "max_pool2d's out without the argmax (inference), computed separably");
    m.def("max_pool2d_backward", [](const py::array& grad, const py::array& argmax,
                                    std::tuple<int64_t, int64_t, int64_t, int64_t> shape) {
        return dispatch_float("max_pool2d_backward", "grad", grad,
            [&] { return max_pool2d_backward_typed<float>(grad, argmax, shape); },
            [&] { return max_pool2d_backward_typed<double>(grad, argmax, shape); });
    }, py::arg("grad"), py::arg("argmax"), py::arg("input_shape"),
       "scatter grad (N, C, out_h, out_w) to its argmax -> (N, C, H, W)");
}

}  // namespace bind
}  // namespace tianyuan
