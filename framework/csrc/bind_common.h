// Shared by the bind_*.cpp files: array aliases and argument helpers for the pybind11 glue.
// Only bindings.cpp and bind_*.cpp include pybind11; kernels know nothing of Python.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "bind_geometry.h"
#include "im2col/im2col.h"

namespace tianyuan {
namespace bind {

namespace py = pybind11;

// The module's `testing` submodule (made first, in bindings.cpp): functions only the tests
// and benchmarks call (register peaks, scratch canaries, ...), kept off the module's API.
inline py::module_ testing_of(py::module_& m) { return m.attr("testing").cast<py::module_>(); }

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

// "(2, 3, 4)": an array's shape for error messages.
inline std::string shape_str(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + ")";
}

// Whether `a` holds T's values: an equivalent dtype, not only numpy's own instance of it (an
// unpickled array carries a dtype object of its own, which `dtype().is(...)` refused).
template <typename T>
inline bool has_dtype(const py::array& a) {
    return py::isinstance<py::array_t<T>>(a);
}

// float32 and float64 (float64 serves the finite-difference gradient checks).
template <typename F32, typename F64>
py::array dispatch_float(const char* op, const char* arg, const py::array& a, F32 f32, F64 f64) {
    if (has_dtype<float>(a)) return f32();
    if (has_dtype<double>(a)) return f64();
    throw py::value_error(std::string(op) + ": " + arg + " must be float32 or float64, got " +
                          std::string(py::str(a.dtype())));
}

// A float convolution's geometry over input (N, C, H, W), checked by window_2d (PyTorch's
// rules: any padding) with its im2col matrix's sizes; errors name `op`.
Conv2dGeometry make_geometry(const char* op, const Dims& input, Pair kernel, Pair stride,
                             Quad padding, Pair dilation);

// One per family, each in its own bind_<family>.cpp; bindings.cpp calls them all.
void bind_runtime(py::module_& m);
void bind_im2col(py::module_& m);
void bind_pool(py::module_& m);
void bind_depthwise(py::module_& m);
void bind_norm(py::module_& m);
void bind_optim(py::module_& m);
void bind_winograd(py::module_& m);
void bind_conv_gemm(py::module_& m);
void bind_int8(py::module_& m);
void bind_int8_deconv(py::module_& m);  // int8_deconv/bind_int8_deconv.cpp
void bind_roi_align(py::module_& m);  // roi_align/
void bind_imgproc(py::module_& m);    // imgproc/
void bind_nms(py::module_& m);        // nms/

}  // namespace bind
}  // namespace tianyuan
