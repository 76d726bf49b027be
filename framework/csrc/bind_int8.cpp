// pybind11 glue: int8 kernels (framework/csrc/int8_*.{h,cpp}, requant*.cpp).
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "int8_amx.h"
#include "int8_cgemm.h"
#include "int8_ops.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
namespace {

// ---- int8: quantized kernels (framework/csrc/int8_*.{h,cpp}, requant*.cpp) ----

using Quad64 = std::tuple<int64_t, int64_t, int64_t, int64_t>;

int8::QIn int8_input(const py::array& x, int zero_point, const char* op,
                     bool contiguous = true) {
    const bool s8 = x.dtype().is(py::dtype::of<int8_t>());
    if (!s8 && !x.dtype().is(py::dtype::of<uint8_t>())) {
        throw std::invalid_argument(std::string(op) + ": input must be uint8 or int8, got " +
                                    std::string(py::str(x.dtype())));
    }
    if (contiguous && !(x.flags() & py::array::c_style)) {
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
                           bool out_signed, const char* op, int out_max = 255) {
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
    // out_max (ReLU6) lowers the upper bound; it never goes below the lower one
    const int top = out_max < hi ? (out_max > (relu ? zp : lo) ? out_max : (relu ? zp : lo)) : hi;
    return {bias.data(), mult.data(), shift.data(), 1, zp, relu ? zp : lo, top, out_signed};
}

void int8_check_packed(const Array<int8_t>& packed, const Array<int32_t>& sums, int64_t groups,
                       int64_t n, int64_t k, const char* op) {
    if (packed.size() != groups * int8::packed_size(n, k) || sums.size() != groups * n) {
        throw std::invalid_argument(std::string(op) + ": packed weights do not match N=" +
                                    std::to_string(n) + " K=" + std::to_string(k));
    }
    if (k > 65793) throw std::invalid_argument(std::string(op) + ": K > 65793 may overflow s32");
}

// Conv layout (int8_cgemm.h): groups * OCg * Kp bytes.
void int8_check_conv_packed(const Array<int8_t>& packed, const Array<int32_t>& sums,
                            int64_t groups, int64_t n, int64_t k) {
    if (packed.size() != groups * n * int8::round_up(k, int8::kGroup) || sums.size() != groups * n) {
        throw std::invalid_argument("int8_conv2d: packed weights do not match OC/groups=" +
                                    std::to_string(n) + " K=" + std::to_string(k));
    }
    if (k > 65793) throw std::invalid_argument("int8_conv2d: K > 65793 may overflow s32");
}

// The narrow form of conv weights (int8_cgemm.h, NarrowWeights) as int8_split_narrow returns
// it, checked against the packed weights' size and OC. The entries themselves are trusted:
// kernels.PackedWeight makes them with int8_split_narrow and keeps them with the weights.
using NarrowArrays = std::tuple<Array<int8_t>, Array<int32_t>, Array<int32_t>>;
int8::NarrowWeights int8_check_narrow(const NarrowArrays& n, int64_t packed_size, int64_t oc) {
    const auto& [w, ptr, res] = n;
    if (w.size() != packed_size || ptr.size() != oc + 1 || ptr.data()[0] != 0 ||
        res.size() != 2 * static_cast<int64_t>(ptr.data()[oc])) {
        throw std::invalid_argument(
            "int8_conv2d: the narrow form (" + std::to_string(w.size()) + " bytes, " +
            std::to_string(ptr.size()) + " row offsets, " + std::to_string(res.size()) +
            " residual words) does not match the packed weights (" +
            std::to_string(packed_size) + " bytes, OC " + std::to_string(oc) + ")");
    }
    return {w.data(), ptr.data(), res.data()};
}

py::tuple int8_pack_conv(const Array<int8_t>& w) {
    if (w.ndim() != 4) {
        throw std::invalid_argument("int8_pack_conv_weights: w must be (G, N, C/groups, kh*kw)");
    }
    const int64_t g = w.shape(0), n = w.shape(1), cg = w.shape(2), taps = w.shape(3);
    const int64_t size = n * int8::round_up(cg * taps, int8::kGroup);
    Array<int8_t> packed(g * size);
    Array<int32_t> sums(g * n);
    for (int64_t i = 0; i < g; ++i) {
        int8::pack_conv_weights(w.data() + i * n * cg * taps, n, cg, taps,
                                packed.mutable_data() + i * size, sums.mutable_data() + i * n);
    }
    return py::make_tuple(packed, sums);
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
    m.def("int8_vnni_peak", &int8::vnni_peak, py::arg("steps"),
          py::call_guard<py::gil_scoped_release>(),
          "int8 operations per second of a register-only vpdpbusd loop (steps x 12 "
          "instructions on every thread): the VNNI peak; RuntimeError without VNNI");
    m.def("int8_avx2_peak", &int8::avx2_peak, py::arg("steps"),
          py::call_guard<py::gil_scoped_release>(),
          "int8 operations per second of a register-only vpmaddwd + vpaddd loop (the exact "
          "AVX2 product; steps x 6 pairs on every thread); RuntimeError without AVX2");
    m.def("int8_avxvnni_peak", &int8::avxvnni_peak, py::arg("steps"),
          py::call_guard<py::gil_scoped_release>(),
          "int8 operations per second of a register-only AVX-VNNI vpdpbusd loop (ymm, "
          "steps x 12 instructions on every thread); RuntimeError without AVX-VNNI");
    m.def("int8_pack_weights", &int8_pack, py::arg("w"),
          "w s8 (G, N, K) -> (packed s8, row_sums s32 (G*N,)); layout in int8_gemm.h");
    m.def("int8_pack_conv_weights", &int8_pack_conv, py::arg("w"),
          "w s8 (G, OC/G, C/G, kh*kw) -> (packed s8, row_sums s32 (OC,)); layout in "
          "int8_cgemm.h");
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
                            bool relu, bool out_signed, int out_max,
                            std::pair<int64_t, int64_t> stride, Quad64 pad,
                            std::pair<int64_t, int64_t> dil, int64_t groups, int algo,
                            const std::optional<Array<int8_t>>& amx,
                            const std::optional<NarrowArrays>& narrow) {
        const int8::ConvGeom g = int8_geom(x, wshape, stride, pad, dil, groups);
        if (algo < 0 || algo > 3) {
            throw std::invalid_argument("int8_conv2d: algo must be 0 (automatic), 1 (packed), "
                                        "2 (direct) or 3 (amx), got " + std::to_string(algo));
        }
        int8_check_conv_packed(packed, sums, groups, g.oc / groups,
                               std::get<1>(wshape) * g.kh * g.kw);
        if (amx && amx->size() != int8::amx_packed_size(g.oc, g.c, g.kh * g.kw)) {
            throw std::invalid_argument("int8_conv2d: AMX weights have " +
                                        std::to_string(amx->size()) + " bytes, expected " +
                                        std::to_string(g.oc * g.c * g.kh * g.kw));
        }
        int8::NarrowWeights nw{};
        if (narrow) nw = int8_check_narrow(*narrow, packed.size(), g.oc);
        const int8::QIn in = int8_input(x, zp, "int8_conv2d");
        const int8::Requant r = int8_requant(bias, mult, shift, g.oc, out_zp, relu, out_signed,
                                             "int8_conv2d", out_max);
        py::array out = int8_output(out_signed, {g.n, g.oc, g.oh, g.ow});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::conv2d(in, g, packed.data(), sums.data(), bias.data(), r, o,
                     static_cast<int8::ConvAlgo>(algo), amx ? amx->data() : nullptr,
                     narrow ? &nw : nullptr);
        return out;
    }, py::arg("x"), py::arg("zp"), py::arg("packed"), py::arg("sums"), py::arg("wshape"),
       py::arg("bias"), py::arg("mult"), py::arg("shift"), py::arg("out_zp"), py::arg("relu"),
       py::arg("out_signed"), py::arg("out_max"), py::arg("stride"), py::arg("pad"),
       py::arg("dil"), py::arg("groups"), py::arg("algo") = 0, py::arg("amx") = py::none(),
       py::arg("narrow") = py::none());
    m.def("int8_narrow_tile", &int8::narrow_tile,
          "whether the current ISA's convolution tile reads the narrow form (int8_cgemm.h)");
    m.def("int8_split_narrow", [](const Array<int8_t>& packed, int64_t groups, int64_t ocg,
                                  int64_t kp) {
        if (groups < 1 || ocg < 1 || kp < 1 || kp % int8::kGroup ||
            packed.size() != groups * ocg * kp) {
            throw std::invalid_argument("int8_split_narrow: packed has " +
                                        std::to_string(packed.size()) + " bytes, not groups " +
                                        std::to_string(groups) + " x OC/groups " +
                                        std::to_string(ocg) + " x Kp " + std::to_string(kp));
        }
        Array<int8_t> narrow(packed.size());
        std::vector<int32_t> res_ptr, res;
        int8::split_narrow(packed.data(), groups, ocg, kp, narrow.mutable_data(), &res_ptr,
                           &res);
        Array<int32_t> ptr(static_cast<py::ssize_t>(res_ptr.size()));
        Array<int32_t> entries(static_cast<py::ssize_t>(res.size()));
        std::copy(res_ptr.begin(), res_ptr.end(), ptr.mutable_data());
        std::copy(res.begin(), res.end(), entries.mutable_data());
        return py::make_tuple(narrow, ptr, entries);
    }, py::arg("packed"), py::arg("groups"), py::arg("ocg"), py::arg("kp"),
       "conv-packed s8 -> its narrow form (packed s8, res_ptr s32 (OC + 1,), res s32 "
       "(2 * nnz,)); int8_cgemm.h, NarrowWeights");
    m.def("int8_amx_peak", &int8::amx_peak, py::arg("steps"),
          py::call_guard<py::gil_scoped_release>(),
          "int8 operations per second of a register-only TDPBUSD loop (steps x 4 "
          "instructions on every thread): the AMX peak; RuntimeError without AMX");
    m.def("int8_pack_conv_weights_amx", [](const Array<int8_t>& w) {
        if (w.ndim() != 4) {
            throw std::invalid_argument("int8_pack_conv_weights_amx: w must be (OC, C, kh, kw)");
        }
        const int64_t oc = w.shape(0), c = w.shape(1), taps = w.shape(2) * w.shape(3);
        if (c % int8::kAmxK || oc % int8::kAmxOc) {
            throw std::invalid_argument("int8_pack_conv_weights_amx: C must be a multiple of 64"
                                        " and OC of 32, got w " + shape_str(w));
        }
        Array<int8_t> out(int8::amx_packed_size(oc, c, taps));
        int8::amx_pack_weights(w.data(), oc, c, taps, out.mutable_data());
        return out;
    }, py::arg("w"), "w s8 (OC, C, kh, kw) -> the AMX tiles' weight layout (int8_amx.h)");
    m.def("int8_depthwise_conv2d", [](const py::array& x, int zp, const Array<int8_t>& w,
                                      const Array<int32_t>& bias, const Array<int32_t>& mult,
                                      const Array<int32_t>& shift, int out_zp, bool relu,
                                      bool out_signed, int out_max,
                                      std::pair<int64_t, int64_t> stride,
                                      Quad64 pad, std::pair<int64_t, int64_t> dil) {
        if (w.ndim() != 4) throw std::invalid_argument("int8_depthwise_conv2d: w (OC, 1, kh, kw)");
        const Quad64 ws{w.shape(0), 1, w.shape(2), w.shape(3)};
        const int8::ConvGeom g = int8_geom(x, ws, stride, pad, dil, x.ndim() == 4 ? x.shape(1) : 1);
        const int8::QIn in = int8_input(x, zp, "int8_depthwise_conv2d");
        const int8::Requant r = int8_requant(bias, mult, shift, g.oc, out_zp, relu, out_signed,
                                             "int8_depthwise_conv2d", out_max);
        py::array out = int8_output(out_signed, {g.n, g.oc, g.oh, g.ow});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::depthwise_conv2d(in, g, w.data(), bias.data(), r, o);
        return out;
    });
}

void bind_int8_eltwise(py::module_& m) {
    m.def("int8_quantize", [](const Array<float>& x, float scale, int zp, bool out_signed) {
        if (!(scale > 0.0f) || !std::isfinite(scale))
            throw std::invalid_argument("int8_quantize: scale must be positive and finite");
        std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
        py::array out = int8_output(out_signed, shape);
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::quantize(x.data(), x.size(), scale, zp, out_signed, o);
        return out;
    }, "float32 x -> u8/s8 clamp(round_half_even(x / scale) + zp), per tensor");
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
        const int8::QIn in = int8_input(x, zp, "int8_concat", false);
        if (x.size() != outer * inner || offset + inner > out_inner ||
            out.size() != outer * out_inner || shift < 1 || shift > 62)
            throw std::invalid_argument("int8_concat: part does not fit the output");
        int8::PartRows rows{outer, inner, outer, 0};
        if (!(x.flags() & py::array::c_style)) {
            // a channel slice (N, k, H, W) of a C-contiguous tensor: each image's k planes
            // contiguous, the images strides[0] apart
            const bool planes = x.ndim() == 4 && x.strides(3) == 1 &&
                                x.strides(2) == x.shape(3) &&
                                x.strides(1) == x.shape(2) * x.shape(3) &&
                                x.strides(0) >= x.shape(1) * x.strides(1) && x.shape(0) > 0 &&
                                outer % x.shape(0) == 0;
            const int64_t group = planes ? outer / x.shape(0) : 0;
            if (!planes || group * inner != x.shape(1) * x.strides(1)) {
                std::string strides;
                for (py::ssize_t i = 0; i < x.ndim(); ++i)
                    strides += (i ? ", " : "") + std::to_string(x.strides(i));
                throw std::invalid_argument(
                    "int8_concat: input must be C-contiguous or a channel slice (N, k, H, W) "
                    "of a C-contiguous tensor, got strides (" + strides + ")");
            }
            rows.group = group;
            rows.group_stride = x.strides(0);
        }
        const bool out_signed = out.dtype().is(py::dtype::of<int8_t>());
        auto* o = static_cast<uint8_t*>(out.mutable_data()) + offset;
        py::gil_scoped_release unlocked;
        int8::concat_part(in, rows, mult, shift, out_zp, out_signed, o, out_inner);
    }, "writes x (outer, inner) requantized into out (outer, out_inner) at column offset; "
       "x C-contiguous or a channel slice (N, k, H, W) of a C-contiguous tensor");
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

}  // namespace

void bind_int8(py::module_& m) {
    bind_int8_gemm(m);
    bind_int8_conv(m);
    bind_int8_eltwise(m);
}

}  // namespace bind
}  // namespace tianyuan
