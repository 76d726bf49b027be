// The only file that knows Python: turns numpy arrays into pointers and shapes and
// calls the kernels. Kernel families live in their own files and know nothing of Python.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <omp.h>

#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "cpu.h"
#include "im2col.h"

namespace py = pybind11;
using namespace tianyuan;

#ifndef TIANYUAN_BUILD_FLAGS
#define TIANYUAN_BUILD_FLAGS ""
#endif

namespace {

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

Isa parse_isa(const std::string& name) {
    for (int i = 0; i <= static_cast<int>(Isa::amx); ++i) {
        if (name == isa_name(static_cast<Isa>(i))) return static_cast<Isa>(i);
    }
    throw std::invalid_argument("unknown ISA '" + name +
                                "'; expected one of generic, avx2, avx512, vnni, amx");
}

py::dict features_dict() {
    const CpuFeatures& f = cpu_features();
    py::dict d;
    d["avx2"] = f.avx2;
    d["fma"] = f.fma;
    d["avx512f"] = f.avx512f;
    d["avx512bw"] = f.avx512bw;
    d["avx512vl"] = f.avx512vl;
    d["avx512dq"] = f.avx512dq;
    d["avx512_vnni"] = f.avx512vnni;
    d["amx_tile"] = f.amx_tile;
    d["amx_int8"] = f.amx_int8;
    d["os_avx512"] = f.os_avx512;
    d["os_amx"] = f.os_amx;
    return d;
}

void bind_runtime(py::module_& m) {
    m.def("cpu_features", &features_dict, "CPU features as detected by CPUID and XGETBV");
    m.def("best_isa", [] { return std::string(isa_name(best_isa())); });
    m.def("current_isa", [] { return std::string(isa_name(current_isa())); });
    m.def("set_isa", [](const std::string& name) {
        const Isa isa = parse_isa(name);
        if (!set_isa(isa)) {
            throw std::runtime_error("ISA '" + name + "' is not supported by this CPU/OS; best is '" +
                                     isa_name(best_isa()) + "'");
        }
    });
    m.def("set_num_threads", [](int n) {
        if (n < 1) throw std::invalid_argument("set_num_threads: n must be >= 1, got " + std::to_string(n));
        omp_set_num_threads(n);
    });
    m.def("get_num_threads", [] { return omp_get_max_threads(); });
    m.attr("build_flags") = TIANYUAN_BUILD_FLAGS;
    m.attr("compiler") = __VERSION__;
}

// ---------------------------------------------------------------- im2col / col2im

using Pair = std::pair<int64_t, int64_t>;
using Quad = std::tuple<int64_t, int64_t, int64_t, int64_t>;

Conv2dGeometry make_geometry(const char* op, int64_t n, int64_t c, int64_t h, int64_t w,
                             Pair kernel, Pair stride, Quad padding, Pair dilation) {
    Conv2dGeometry g{n, c, h, w, kernel.first, kernel.second, stride.first, stride.second,
                     std::get<0>(padding), std::get<1>(padding), std::get<2>(padding),
                     std::get<3>(padding), dilation.first, dilation.second};
    const std::string name(op);
    if (g.kh < 1 || g.kw < 1) throw py::value_error(name + ": kernel must be >= 1");
    if (g.sh < 1 || g.sw < 1) throw py::value_error(name + ": stride must be >= 1");
    if (g.dh < 1 || g.dw < 1) throw py::value_error(name + ": dilation must be >= 1");
    if (g.pt < 0 || g.pb < 0 || g.pl < 0 || g.pr < 0)
        throw py::value_error(name + ": padding must be >= 0");
    if (g.h + g.pt + g.pb < g.dh * (g.kh - 1) + 1 || g.w + g.pl + g.pr < g.dw * (g.kw - 1) + 1)
        throw py::value_error(name + ": kernel (" + std::to_string(g.kh) + ", " +
                              std::to_string(g.kw) + ") with dilation is larger than the padded "
                              "input (" + std::to_string(g.h) + ", " + std::to_string(g.w) + ")");
    return g;
}

template <typename T>
py::array im2col_typed(const py::array& x_any, Pair kernel, Pair stride, Quad padding,
                       Pair dilation) {
    Array<T> x = Array<T>::ensure(x_any);
    if (x.ndim() != 4) throw py::value_error("im2col: x must be 4-D (N, C, H, W), got " +
                                             std::to_string(x.ndim()) + "-D");
    const Conv2dGeometry g = make_geometry("im2col", x.shape(0), x.shape(1), x.shape(2),
                                           x.shape(3), kernel, stride, padding, dilation);
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
    const Conv2dGeometry g = make_geometry("col2im", n, c, h, w, kernel, stride, padding, dilation);
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

// float32 and float64 (float64 serves the finite-difference gradient checks).
template <typename F32, typename F64>
py::array dispatch_float(const char* op, const char* arg, const py::array& a, F32 f32, F64 f64) {
    if (a.dtype().is(py::dtype::of<float>())) return f32();
    if (a.dtype().is(py::dtype::of<double>())) return f64();
    throw py::value_error(std::string(op) + ": " + arg + " must be float32 or float64, got " +
                          std::string(py::str(a.dtype())));
}

void bind_im2col(py::module_& m) {
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

}  // namespace

PYBIND11_MODULE(_C, m) {
    m.doc() = "tianyuan native kernels";
    bind_runtime(m);
    bind_im2col(m);
}
