// pybind11 glue: im2col / col2im (framework/csrc/im2col/im2col.h).
#include <string>
#include <tuple>

#include "im2col/im2col.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {

Conv2dGeometry make_geometry(const char* op, const Dims& input, Pair kernel, Pair stride,
                             Quad padding, Pair dilation) {
    const Window2d out = window_2d(op, input, kernel, stride, padding, dilation, PadRule::any);
    const Conv2dGeometry g{input.d[0], input.d[1], input.d[2], input.d[3], kernel.first,
                           kernel.second, stride.first, stride.second, std::get<0>(padding),
                           std::get<1>(padding), std::get<2>(padding), std::get<3>(padding),
                           dilation.first, dilation.second};
    // the column matrix (C * kh * kw, N * oh * ow) its kernels index
    checked_mul(g.c, checked_mul(g.kh, g.kw, op, "the kernel"), op, "im2col rows");
    checked_mul(g.n, checked_mul(out.oh, out.ow, op, "the output plane"), op, "im2col columns");
    return g;
}

namespace {

template <typename T>
py::array im2col_typed(const py::array& x_any, Pair kernel, Pair stride, Quad padding,
                       Pair dilation) {
    Array<T> x = Array<T>::ensure(x_any);
    if (x.ndim() != 4) throw py::value_error("im2col: x must be 4-D (N, C, H, W), got " +
                                             std::to_string(x.ndim()) + "-D");
    const Conv2dGeometry g = make_geometry("im2col", dims_of(x), kernel, stride, padding,
                                           dilation);
    Array<T> cols({g.col_rows(), g.col_cols()});
    {
        py::gil_scoped_release release;
        im2col<T>(x.data(), g, cols.mutable_data());
    }
    return cols;
}

template <typename T>
py::array col2im_typed(const py::array& cols_any, std::tuple<int64_t, int64_t, int64_t, int64_t> shape,
                       Pair kernel, Pair stride, Quad padding, Pair dilation) {
    Array<T> cols = Array<T>::ensure(cols_any);
    auto [n, c, h, w] = shape;
    checked_shape("col2im", "input_shape", dims_of(shape));
    const Conv2dGeometry g = make_geometry("col2im", dims_of(shape), kernel, stride, padding,
                                           dilation);
    if (cols.ndim() != 2 || cols.shape(0) != g.col_rows() || cols.shape(1) != g.col_cols())
        throw py::value_error("col2im: cols must have shape (" + std::to_string(g.col_rows()) +
                              ", " + std::to_string(g.col_cols()) + ") for input_shape (" +
                              std::to_string(n) + ", " + std::to_string(c) + ", " +
                              std::to_string(h) + ", " + std::to_string(w) + ")");
    Array<T> x({n, c, h, w});
    {
        py::gil_scoped_release release;
        col2im<T>(cols.data(), g, x.mutable_data());
    }
    return x;
}

template <typename T>
py::array flip_kernel_typed(const py::array& w_any) {
    Array<T> w = Array<T>::ensure(w_any);
    if (!w || w.ndim() != 4) throw py::value_error("conv_flip_kernel: w must be (Co, C, kh, kw)");
    const int64_t co = w.shape(0), c = w.shape(1), kh = w.shape(2), kw = w.shape(3);
    Array<T> out({c, co, kh, kw});
    {
        py::gil_scoped_release release;
        flip_kernel<T>(w.data(), co, c, kh, kw, out.mutable_data());
    }
    return std::move(out);
}

}  // namespace

void bind_im2col(py::module_& m) {
    m.def("conv_flip_kernel", [](const py::array& w) {
        return dispatch_float("conv_flip_kernel", "w", w,
                              [&] { return flip_kernel_typed<float>(w); },
                              [&] { return flip_kernel_typed<double>(w); });
    }, py::arg("w"), "w (Co, C, kh, kw) -> (C, Co, kh, kw), taps reversed: the kernel of the "
       "adjoint convolution");
    m.def("im2col", [](const py::array& x, Pair kernel, Pair stride, Quad padding, Pair dilation) {
        return dispatch_float("im2col", "x", x,
            [&] { return im2col_typed<float>(x, kernel, stride, padding, dilation); },
            [&] { return im2col_typed<double>(x, kernel, stride, padding, dilation); });
    }, py::arg("x"), py::arg("kernel"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
       "x (N, C, H, W) -> cols (C*kh*kw, N*out_h*out_w); padding (top, bottom, left, right)");
    m.def("col2im", [](const py::array& cols, std::tuple<int64_t, int64_t, int64_t, int64_t> shape,
                       Pair kernel, Pair stride, Quad padding, Pair dilation) {
        return dispatch_float("col2im", "cols", cols,
            [&] { return col2im_typed<float>(cols, shape, kernel, stride, padding, dilation); },
            [&] { return col2im_typed<double>(cols, shape, kernel, stride, padding, dilation); });
    }, py::arg("cols"), py::arg("input_shape"), py::arg("kernel"), py::arg("stride"),
       py::arg("padding"), py::arg("dilation"),
       "adjoint of im2col: cols (C*kh*kw, N*out_h*out_w) -> summed (N, C, H, W)");
}

}  // namespace bind
}  // namespace tianyuan
