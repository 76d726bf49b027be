// pybind11 glue: int8 kernels (framework/csrc/int8_*.{h,cpp}, requant*.cpp): the GEMM, the
// linear layer and requantization, elementwise ops and pooling here; the convolutions in
// bind_int8_conv.cpp.
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "int8_ops.h"

#include "bind_int8_common.h"

namespace tianyuan {
namespace bind {
namespace {

void int8_check_packed(const Array<int8_t>& packed, const Array<int32_t>& sums, int64_t groups,
                       int64_t n, int64_t k, const char* op) {
    const int64_t want = groups * int8::packed_size(n, k);
    if (packed.size() != want || sums.size() != groups * n) {
        throw std::invalid_argument(std::string(op) + ": packed weights of " +
                                    std::to_string(packed.size()) + " bytes and " +
                                    std::to_string(sums.size()) + " row sums do not match N " +
                                    std::to_string(n) + " x K " + std::to_string(k) + " (" +
                                    std::to_string(want) + " bytes)");
    }
    if (k > 65793) {
        throw std::invalid_argument(std::string(op) + ": K " + std::to_string(k) +
                                    " > 65793 may overflow s32");
    }
}

py::tuple int8_pack(const Array<int8_t>& w) {
    if (w.ndim() != 3) {
        throw std::invalid_argument("int8_pack_weights: w must be (G, N, K), got " +
                                    shape_str(w));
    }
    const int64_t g = w.shape(0), n = w.shape(1), k = w.shape(2), size = int8::packed_size(n, k);
    Array<int8_t> packed(g * size);
    Array<int32_t> sums(g * n);
    for (int64_t i = 0; i < g; ++i) {
        int8::pack_weights(w.data() + i * n * k, n, k, packed.mutable_data() + i * size,
                           sums.mutable_data() + i * n);
    }
    return py::make_tuple(packed, sums);
}

int8::PoolGeom int8_pool_geom(const py::array& x, std::pair<int64_t, int64_t> k,
                              std::pair<int64_t, int64_t> s, Quad p) {
    if (x.ndim() != 4) {
        throw std::invalid_argument("int8 pool: x must be (N, C, H, W), got " + shape_str(x));
    }
    int8::PoolGeom g{x.shape(0) * x.shape(1), x.shape(2), x.shape(3), k.first, k.second,
                     s.first, s.second, std::get<0>(p), std::get<1>(p), std::get<2>(p),
                     std::get<3>(p), 0, 0};
    const bool fits = g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 && g.pt >= 0 &&
                      g.pb >= 0 && g.pl >= 0 && g.pr >= 0 && 2 * g.pt <= g.kh &&
                      2 * g.pb <= g.kh && 2 * g.pl <= g.kw && 2 * g.pr <= g.kw;
    if (fits) {
        g.oh = (g.h + g.pt + g.pb - g.kh) / g.sh + 1;
        g.ow = (g.w + g.pl + g.pr - g.kw) / g.sw + 1;
    }
    if (!fits || g.oh < 1 || g.ow < 1) {
        throw std::invalid_argument(
            "int8 pool: kernel (" + std::to_string(g.kh) + ", " + std::to_string(g.kw) +
            "), stride (" + std::to_string(g.sh) + ", " + std::to_string(g.sw) +
            "), padding (" + std::to_string(g.pt) + ", " + std::to_string(g.pb) + ", " +
            std::to_string(g.pl) + ", " + std::to_string(g.pr) + ") do not fit input " +
            shape_str(x) + " (padding at most half the kernel)");
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
    m.def("int8_gemm_s32", [](const py::array& x, int zp, const Array<int8_t>& packed,
                              const Array<int32_t>& sums, int64_t n) {
        if (x.ndim() != 2) {
            throw std::invalid_argument("int8_gemm_s32: x must be (M, K), got " + shape_str(x));
        }
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
        if (x.ndim() != 2) {
            throw std::invalid_argument("int8_linear: x must be (M, K), got " + shape_str(x));
        }
        const int64_t rows = x.shape(0), k = x.shape(1);
        int8_check_packed(packed, sums, 1, n, k, "int8_linear");
        const int8::QIn in = int8_input(x, zp, "int8_linear");
        const int8::Requant r = int8_requant(bias, mult, shift, n, out_zp, relu, out_signed,
                                             "int8_linear");
        py::array out = int8_output(out_signed, {rows, n});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::linear(in, rows, k, packed.data(), sums.data(), n, bias.data(), r, o);
        return out;
    });
    m.def("int8_requantize", [](const Array<int32_t>& acc, const Array<int32_t>& bias,
                                const Array<int32_t>& mult, const Array<int32_t>& shift,
                                int out_zp, bool relu, bool out_signed) {
        if (acc.ndim() != 2) {
            throw std::invalid_argument("int8_requantize: acc must be (M, N), got " +
                                        shape_str(acc));
        }
        const int64_t rows = acc.shape(0), n = acc.shape(1);
        const int8::Requant r = int8_requant(bias, mult, shift, n, out_zp, relu, out_signed,
                                             "int8_requantize");
        py::array out = int8_output(out_signed, {rows, n});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::requantize(acc.data(), n, rows, n, r, false, o, n);
        return out;
    }, "acc s32 (M, N), per-column bias/multiplier/shift (N,) -> u8/s8 (M, N)");
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
        if (a.size() != b.size()) {
            throw std::invalid_argument("int8_add: a " + shape_str(a) + " and b " + shape_str(b) +
                                        " differ in size");
        }
        if (shift < 1 || shift > 62) {
            throw std::invalid_argument("int8_add: shift must be in [1, 62], got " +
                                        std::to_string(shift));
        }
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
            out.size() != outer * out_inner || shift < 1 || shift > 62) {
            throw std::invalid_argument(
                "int8_concat: part " + shape_str(x) + " as (" + std::to_string(outer) + ", " +
                std::to_string(inner) + ") at column " + std::to_string(offset) +
                " does not fit the output " + shape_str(out) + " as (" + std::to_string(outer) +
                ", " + std::to_string(out_inner) + "), or shift " + std::to_string(shift) +
                " is outside [1, 62]");
        }
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
                                std::pair<int64_t, int64_t> s, Quad p) {
        const int8::PoolGeom g = int8_pool_geom(x, k, s, p);
        const int8::QIn in = int8_input(x, 0, "int8_max_pool2d");
        py::array out = int8_output(in.is_signed, {x.shape(0), x.shape(1), g.oh, g.ow});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::max_pool2d(in, g, o);
        return out;
    });
    m.def("int8_avg_pool2d", [](const py::array& x, int zp, std::pair<int64_t, int64_t> k,
                                std::pair<int64_t, int64_t> s, Quad p, bool include_pad) {
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
