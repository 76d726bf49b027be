// The only file that knows Python: turns numpy arrays into pointers and shapes and
// calls the kernels. Kernel families live in their own files and know nothing of Python.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <omp.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cpu.h"
#include "im2col.h"
#include "pool.h"
#include "int8_ops.h"

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

// ---- int8: quantized kernels (framework/csrc/int8_*.{h,cpp}, requant*.cpp) ----

using Quad64 = std::tuple<int64_t, int64_t, int64_t, int64_t>;

int8::QIn int8_input(const py::array& x, int zero_point, const char* op) {
    const bool s8 = x.dtype().is(py::dtype::of<int8_t>());
    if (!s8 && !x.dtype().is(py::dtype::of<uint8_t>())) {
        throw std::invalid_argument(std::string(op) + ": input must be uint8 or int8, got " +
                                    std::string(py::str(x.dtype())));
    }
    if (!(x.flags() & py::array::c_style)) {
        throw std::invalid_argument(std::string(op) + ": input must be C-contiguous");
    }
    return {static_cast<const uint8_t*>(x.data()), s8, zero_point};
}

py::array int8_output(bool out_signed, std::vector<py::ssize_t> shape) {
    return py::array(out_signed ? py::dtype::of<int8_t>() : py::dtype::of<uint8_t>(), shape);
}

// Per-channel bias/multiplier/shift of length n; output bounds with relu folded in.
int8::Requant int8_requant(const Array<int32_t>& bias, const Array<int32_t>& mult,
                           const Array<int32_t>& shift, int64_t n, int zp, bool relu,
                           bool out_signed, const char* op) {
    if (bias.size() != n || mult.size() != n || shift.size() != n) {
        throw std::invalid_argument(std::string(op) + ": bias/multiplier/shift need " +
                                    std::to_string(n) + " entries each");
    }
    for (int64_t j = 0; j < n; ++j) {
        if (shift.data()[j] < 1 || shift.data()[j] > 62)
            throw std::invalid_argument(std::string(op) + ": shift must be in [1, 62]");
    }
    const int lo = out_signed ? -128 : 0, hi = out_signed ? 127 : 255;
    if (zp < lo || zp > hi) throw std::invalid_argument(std::string(op) + ": bad out zero point");
    return {bias.data(), mult.data(), shift.data(), 1, zp, relu ? zp : lo, hi, out_signed};
}

void int8_check_packed(const Array<int8_t>& packed, const Array<int32_t>& sums, int64_t groups,
                       int64_t n, int64_t k, const char* op) {
    if (packed.size() != groups * int8::packed_size(n, k) || sums.size() != groups * n) {
        throw std::invalid_argument(std::string(op) + ": packed weights do not match N=" +
                                    std::to_string(n) + " K=" + std::to_string(k));
    }
    if (k > 65793) throw std::invalid_argument(std::string(op) + ": K > 65793 may overflow s32");
}

py::tuple int8_pack(const Array<int8_t>& w) {
    if (w.ndim() != 3) throw std::invalid_argument("int8_pack_weights: w must be (G, N, K)");
    const int64_t g = w.shape(0), n = w.shape(1), k = w.shape(2);
    Array<int8_t> packed(g * int8::packed_size(n, k));
    Array<int32_t> sums(g * n);
    for (int64_t i = 0; i < g; ++i) {
        int8::pack_weights(w.data() + i * n * k, n, k, packed.mutable_data() + i * int8::packed_size(n, k),
                           sums.mutable_data() + i * n);
    }
    return py::make_tuple(packed, sums);
}

int8::ConvGeom int8_geom(const py::array& x, Quad64 wshape, std::pair<int64_t, int64_t> stride,
                         Quad64 pad, std::pair<int64_t, int64_t> dil, int64_t groups) {
    if (x.ndim() != 4) throw std::invalid_argument("int8_conv2d: x must be (N, C, H, W)");
    int8::ConvGeom g{x.shape(0), x.shape(1), x.shape(2), x.shape(3), std::get<0>(wshape),
                     std::get<2>(wshape), std::get<3>(wshape), stride.first, stride.second,
                     dil.first, dil.second, std::get<0>(pad), std::get<1>(pad), std::get<2>(pad),
                     std::get<3>(pad), groups, 0, 0};
    g.oh = (g.h + g.pt + g.pb - g.dh * (g.kh - 1) - 1) / g.sh + 1;
    g.ow = (g.w + g.pl + g.pr - g.dw * (g.kw - 1) - 1) / g.sw + 1;
    if (groups < 1 || g.c != std::get<1>(wshape) * groups || g.oc % groups || g.oh < 1 ||
        g.ow < 1 || g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1) {
        throw std::invalid_argument("int8_conv2d: bad geometry for input (" +
                                    std::to_string(g.c) + " channels), groups " +
                                    std::to_string(groups));
    }
    return g;
}

int8::PoolGeom int8_pool_geom(const py::array& x, std::pair<int64_t, int64_t> k,
                              std::pair<int64_t, int64_t> s, Quad64 p) {
    if (x.ndim() != 4) throw std::invalid_argument("int8 pool: x must be (N, C, H, W)");
    int8::PoolGeom g{x.shape(0) * x.shape(1), x.shape(2), x.shape(3), k.first, k.second,
                     s.first, s.second, std::get<0>(p), std::get<1>(p), std::get<2>(p),
                     std::get<3>(p), 0, 0};
    g.oh = (g.h + g.pt + g.pb - g.kh) / g.sh + 1;
    g.ow = (g.w + g.pl + g.pr - g.kw) / g.sw + 1;
    if (g.oh < 1 || g.ow < 1 || g.sh < 1 || g.sw < 1 || 2 * g.pt > g.kh || 2 * g.pb > g.kh ||
        2 * g.pl > g.kw || 2 * g.pr > g.kw) {
        throw std::invalid_argument("int8 pool: bad kernel/stride/padding for the input");
    }
    return g;
}

void bind_int8_gemm(py::module_& m) {
    m.def("int8_pack_weights", &int8_pack, py::arg("w"),
          "w s8 (G, N, K) -> (packed s8, row_sums s32 (G*N,)); layout in int8_gemm.h");
    m.def("int8_gemm_s32", [](const py::array& x, int zp, const Array<int8_t>& packed,
                              const Array<int32_t>& sums, int64_t n) {
        if (x.ndim() != 2) throw std::invalid_argument("int8_gemm_s32: x must be (M, K)");
        const int64_t rows = x.shape(0), k = x.shape(1);
        int8_check_packed(packed, sums, 1, n, k, "int8_gemm_s32");
        const int8::QIn in = int8_input(x, zp, "int8_gemm_s32");
        Array<int32_t> c({rows, n});
        py::gil_scoped_release unlocked;
        int8::gemm_s32(in, rows, k, packed.data(), sums.data(), n, c.mutable_data());
        return c;
    }, "x (M, K) u8/s8 -> s32 (M, N) = (x - zp) @ W^T");
    m.def("int8_linear", [](const py::array& x, int zp, const Array<int8_t>& packed,
                            const Array<int32_t>& sums, int64_t n, const Array<int32_t>& bias,
                            const Array<int32_t>& mult, const Array<int32_t>& shift, int out_zp,
                            bool relu, bool out_signed) {
        if (x.ndim() != 2) throw std::invalid_argument("int8_linear: x must be (M, K)");
        const int64_t rows = x.shape(0), k = x.shape(1);
        int8_check_packed(packed, sums, 1, n, k, "int8_linear");
        const int8::QIn in = int8_input(x, zp, "int8_linear");
        const int8::Requant r = int8_requant(bias, mult, shift, n, out_zp, relu, out_signed, "int8_linear");
        py::array out = int8_output(out_signed, {rows, n});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::linear(in, rows, k, packed.data(), sums.data(), n, bias.data(), r, o);
        return out;
    });
    m.def("int8_requantize", [](const Array<int32_t>& acc, const Array<int32_t>& bias,
                                const Array<int32_t>& mult, const Array<int32_t>& shift,
                                int out_zp, bool relu, bool out_signed) {
        if (acc.ndim() != 2) throw std::invalid_argument("int8_requantize: acc must be (M, N)");
        const int64_t rows = acc.shape(0), n = acc.shape(1);
        const int8::Requant r = int8_requant(bias, mult, shift, n, out_zp, relu, out_signed, "int8_requantize");
        py::array out = int8_output(out_signed, {rows, n});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::requantize(acc.data(), n, rows, n, r, false, o, n);
        return out;
    }, "acc s32 (M, N), per-column bias/multiplier/shift (N,) -> u8/s8 (M, N)");
}

void bind_int8_conv(py::module_& m) {
    m.def("int8_conv2d", [](const py::array& x, int zp, const Array<int8_t>& packed,
                            const Array<int32_t>& sums, Quad64 wshape, const Array<int32_t>& bias,
                            const Array<int32_t>& mult, const Array<int32_t>& shift, int out_zp,
                            bool relu, bool out_signed, std::pair<int64_t, int64_t> stride,
                            Quad64 pad, std::pair<int64_t, int64_t> dil, int64_t groups) {
        const int8::ConvGeom g = int8_geom(x, wshape, stride, pad, dil, groups);
        int8_check_packed(packed, sums, groups, g.oc / groups, std::get<1>(wshape) * g.kh * g.kw,
                          "int8_conv2d");
        const int8::QIn in = int8_input(x, zp, "int8_conv2d");
        const int8::Requant r = int8_requant(bias, mult, shift, g.oc, out_zp, relu, out_signed, "int8_conv2d");
        py::array out = int8_output(out_signed, {g.n, g.oc, g.oh, g.ow});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::conv2d(in, g, packed.data(), sums.data(), bias.data(), r, o);
        return out;
    });
    m.def("int8_depthwise_conv2d", [](const py::array& x, int zp, const Array<int8_t>& w,
                                      const Array<int32_t>& bias, const Array<int32_t>& mult,
                                      const Array<int32_t>& shift, int out_zp, bool relu,
                                      bool out_signed, std::pair<int64_t, int64_t> stride,
                                      Quad64 pad, std::pair<int64_t, int64_t> dil) {
        if (w.ndim() != 4) throw std::invalid_argument("int8_depthwise_conv2d: w (OC, 1, kh, kw)");
        const Quad64 ws{w.shape(0), 1, w.shape(2), w.shape(3)};
        const int8::ConvGeom g = int8_geom(x, ws, stride, pad, dil, x.ndim() == 4 ? x.shape(1) : 1);
        const int8::QIn in = int8_input(x, zp, "int8_depthwise_conv2d");
        const int8::Requant r = int8_requant(bias, mult, shift, g.oc, out_zp, relu, out_signed, "int8_depthwise_conv2d");
        py::array out = int8_output(out_signed, {g.n, g.oc, g.oh, g.ow});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::depthwise_conv2d(in, g, w.data(), bias.data(), r, o);
        return out;
    });
}

void bind_int8_eltwise(py::module_& m) {
    m.def("int8_add", [](const py::array& a, int za, const py::array& b, int zb, int32_t ma,
                         int32_t mb, int shift, int out_zp, bool relu, bool out_signed) {
        const int8::QIn qa = int8_input(a, za, "int8_add"), qb = int8_input(b, zb, "int8_add");
        if (a.size() != b.size() || shift < 1 || shift > 62)
            throw std::invalid_argument("int8_add: a, b sizes differ or shift not in [1, 62]");
        const int lo = out_signed ? -128 : 0, hi = out_signed ? 127 : 255;
        const int8::AddParams p{ma, mb, shift, out_zp, relu ? out_zp : lo, hi};
        std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
        py::array out = int8_output(out_signed, shape);
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::add(qa, qb, a.size(), p, o);
        return out;
    });
    m.def("int8_concat_part", [](const py::array& x, int zp, int64_t outer, int64_t inner,
                                 int32_t mult, int shift, int out_zp, py::array out,
                                 int64_t offset, int64_t out_inner) {
        const int8::QIn in = int8_input(x, zp, "int8_concat");
        if (x.size() != outer * inner || offset + inner > out_inner ||
            out.size() != outer * out_inner || shift < 1 || shift > 62)
            throw std::invalid_argument("int8_concat: part does not fit the output");
        const bool out_signed = out.dtype().is(py::dtype::of<int8_t>());
        auto* o = static_cast<uint8_t*>(out.mutable_data()) + offset;
        py::gil_scoped_release unlocked;
        int8::concat_part(in, outer, inner, mult, shift, out_zp, out_signed, o, out_inner);
    }, "writes x (outer, inner) requantized into out (outer, out_inner) at column offset");
    m.def("int8_max_pool2d", [](const py::array& x, std::pair<int64_t, int64_t> k,
                                std::pair<int64_t, int64_t> s, Quad64 p) {
        const int8::PoolGeom g = int8_pool_geom(x, k, s, p);
        const int8::QIn in = int8_input(x, 0, "int8_max_pool2d");
        py::array out = int8_output(in.is_signed, {x.shape(0), x.shape(1), g.oh, g.ow});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::max_pool2d(in, g, o);
        return out;
    });
    m.def("int8_avg_pool2d", [](const py::array& x, int zp, std::pair<int64_t, int64_t> k,
                                std::pair<int64_t, int64_t> s, Quad64 p, bool include_pad) {
        const int8::PoolGeom g = int8_pool_geom(x, k, s, p);
        const int8::QIn in = int8_input(x, zp, "int8_avg_pool2d");
        py::array out = int8_output(in.is_signed, {x.shape(0), x.shape(1), g.oh, g.ow});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::avg_pool2d(in, g, include_pad, o);
        return out;
    });
}

void bind_int8(py::module_& m) {
    bind_int8_gemm(m);
    bind_int8_conv(m);
    bind_int8_eltwise(m);
}

// ---------------------------------------------------------------- max pooling

template <typename T>
py::tuple max_pool2d_typed(const py::array& x_any, Pair kernel, Pair stride, Pair padding,
                           Pair dilation, Pair out_size) {
    Array<T> x = Array<T>::ensure(x_any);
    if (x.ndim() != 4) throw py::value_error("max_pool2d: x must be 4-D (N, C, H, W), got " +
                                             std::to_string(x.ndim()) + "-D");
    const Pool2dGeometry g{x.shape(0), x.shape(1), x.shape(2), x.shape(3),
                           kernel.first, kernel.second, stride.first, stride.second,
                           padding.first, padding.second, dilation.first, dilation.second,
                           out_size.first, out_size.second};
    if (g.kh < 1 || g.kw < 1 || g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1 || g.ph < 0 ||
        g.pw < 0 || g.out_h < 1 || g.out_w < 1 || g.h * g.w > INT32_MAX)
        throw py::value_error("max_pool2d: kernel, stride, dilation and out_size must be >= 1, "
                              "padding >= 0, and the plane under 2^31 pixels");
    Array<T> out({g.n, g.c, g.out_h, g.out_w});
    Array<int32_t> argmax({g.n, g.c, g.out_h, g.out_w});
    {
        py::gil_scoped_release release;
        max_pool2d_forward<T>(x.data(), g, out.mutable_data(), argmax.mutable_data());
    }
    return py::make_tuple(out, argmax);
}

template <typename T>
py::array max_pool2d_backward_typed(const py::array& grad_any, const py::array& argmax_any,
                                    std::tuple<int64_t, int64_t, int64_t, int64_t> shape) {
    Array<T> grad = Array<T>::ensure(grad_any);
    Array<int32_t> argmax = Array<int32_t>::ensure(argmax_any);
    auto [n, c, h, w] = shape;
    if (grad.ndim() != 4 || grad.shape(0) != n || grad.shape(1) != c)
        throw py::value_error("max_pool2d_backward: grad must be (N, C, out_h, out_w) with N, C "
                              "of input_shape");
    if (argmax.ndim() != 4 || argmax.size() != grad.size() ||
        !std::equal(grad.shape(), grad.shape() + 4, argmax.shape()))
        throw py::value_error("max_pool2d_backward: argmax must have grad's shape");
    const Pool2dGeometry g{n, c, h, w, 1, 1, 1, 1, 0, 0, 1, 1, grad.shape(2), grad.shape(3)};
    Array<T> gx({n, c, h, w});
    {
        py::gil_scoped_release release;
        max_pool2d_backward<T>(grad.data(), argmax.data(), g, gx.mutable_data());
    }
    return gx;
}

void bind_pool(py::module_& m) {
    m.def("max_pool2d", [](const py::array& x, Pair kernel, Pair stride, Pair padding,
                           Pair dilation, Pair out_size) -> py::tuple {
        if (x.dtype().is(py::dtype::of<double>()))
            return max_pool2d_typed<double>(x, kernel, stride, padding, dilation, out_size);
        if (x.dtype().is(py::dtype::of<float>()))
            return max_pool2d_typed<float>(x, kernel, stride, padding, dilation, out_size);
        throw py::value_error("max_pool2d: x must be float32 or float64, got " +
                              std::string(py::str(x.dtype())));
    }, py::arg("x"), py::arg("kernel"), py::arg("stride"), py::arg("padding"),
       py::arg("dilation"), py::arg("out_size"),
       "x (N, C, H, W) -> (out, argmax int32 flat index in the H*W plane); padding (top, left)");
    m.def("max_pool2d_backward", [](const py::array& grad, const py::array& argmax,
                                    std::tuple<int64_t, int64_t, int64_t, int64_t> shape) {
        return dispatch_float("max_pool2d_backward", "grad", grad,
            [&] { return max_pool2d_backward_typed<float>(grad, argmax, shape); },
            [&] { return max_pool2d_backward_typed<double>(grad, argmax, shape); });
    }, py::arg("grad"), py::arg("argmax"), py::arg("input_shape"),
       "scatter grad (N, C, out_h, out_w) to its argmax -> (N, C, H, W)");
}

}  // namespace

PYBIND11_MODULE(_C, m) {
    m.doc() = "tianyuan native kernels";
    bind_runtime(m);
    bind_im2col(m);
    bind_pool(m);
    bind_int8(m);
}
