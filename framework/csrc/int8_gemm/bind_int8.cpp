// pybind11 glue: int8 kernels (framework/csrc/int8_*.{h,cpp}, requant*.cpp): the GEMM, the
// linear layer and requantization, elementwise ops and pooling here; the convolutions in
// bind_int8_conv.cpp.
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "int8_gemm/int8_ops.h"

#include "int8_gemm/bind_int8_common.h"

namespace tianyuan {
namespace bind {
namespace {

// A concat part as the kernel reads it: a C-contiguous array (group 0), or a channel slice
// (N, k, H, W) of a C-contiguous tensor read in place (ShuffleNetV2's split), whose images lie
// group_stride bytes apart with `group` rows each before the concat axis (the product of the
// dimensions between 0 and the axis; int8::PartRows). Other strided parts are copied, into
// `keep`.
struct ConcatPart {
    int8::QIn x;
    int32_t mult;
    int shift;
    int64_t group, group_stride;
    py::array keep;
};

bool channel_slice(const py::array& x) {
    return x.ndim() == 4 && x.shape(0) > 0 && x.strides(3) == 1 && x.strides(2) == x.shape(3) &&
           x.strides(1) == x.shape(2) * x.shape(3) && x.strides(0) >= x.shape(1) * x.strides(1);
}

std::vector<ConcatPart> concat_parts(const std::vector<py::array>& parts,
                                     const std::vector<int>& zps,
                                     const std::vector<int32_t>& mults,
                                     const std::vector<int>& shifts, int out_zp, bool out_signed,
                                     int64_t* axis, bool shuffle) {
    const std::string op = "int8_concat";
    const size_t count = parts.size();
    if (count == 0 || zps.size() != count || mults.size() != count || shifts.size() != count) {
        throw std::invalid_argument(op + ": needs one zero point, multiplier and shift per "
                                    "part, got " + std::to_string(count) + " parts and " +
                                    std::to_string(zps.size()) + ", " +
                                    std::to_string(mults.size()) + ", " +
                                    std::to_string(shifts.size()));
    }
    const int64_t ndim = parts[0].ndim();
    if (*axis < -ndim || *axis >= ndim) {
        throw std::invalid_argument(op + ": axis " + std::to_string(*axis) + " is outside " +
                                    "the parts' " + std::to_string(ndim) + " dimensions");
    }
    *axis = *axis < 0 ? *axis + ndim : *axis;
    const int lo = out_signed ? -128 : 0, hi = out_signed ? 127 : 255;
    if (out_zp < lo || out_zp > hi) {
        throw std::invalid_argument(op + ": output zero point " + std::to_string(out_zp) +
                                    " is outside [" + std::to_string(lo) + ", " +
                                    std::to_string(hi) + "]");
    }
    // the messages are built only to be thrown: per part and call they show on small concats
    const auto shapes = [&parts] {
        std::string all;
        for (size_t i = 0; i < parts.size(); ++i) all += (i ? ", " : "") + shape_str(parts[i]);
        return all;
    };
    if (shuffle && (ndim != 4 || *axis != 1)) {
        throw std::invalid_argument("concat: shuffle needs parts of one shape (N, k, H, W) on "
                                    "axis 1, got " + shapes() + " on axis " +
                                    std::to_string(*axis));
    }
    std::vector<ConcatPart> out;
    for (size_t i = 0; i < count; ++i) {
        const py::array& x = parts[i];
        bool fits = x.ndim() == ndim;
        for (int64_t d = 0; fits && d < ndim; ++d) {
            fits = x.shape(d) == parts[0].shape(d) || (d == *axis && !shuffle);
        }
        if (!fits) {
            throw std::invalid_argument(
                (shuffle ? std::string("concat: shuffle needs parts of one shape (N, k, H, W) "
                                       "on axis 1, got ")
                         : op + ": parts must match outside axis " + std::to_string(*axis) +
                               ", got ") + shapes());
        }
        if (shifts[i] < 1 || shifts[i] > 62) {
            throw std::invalid_argument(op + ": shift " + std::to_string(shifts[i]) +
                                        " of part " + std::to_string(i) +
                                        " is outside [1, 62]");
        }
        const bool byte = has_dtype<uint8_t>(x) ||
                          has_dtype<int8_t>(x);
        const std::string part =
            byte ? std::string() : op + ": part " + std::to_string(i) + " " + shape_str(x);
        ConcatPart c{int8_input(x, zps[i], byte ? op.c_str() : part.c_str(), false), mults[i],
                     shifts[i], 0, 0, py::array()};
        if (!(x.flags() & py::array::c_style)) {
            if (*axis > 0 && channel_slice(x)) {
                // rows per image: the slice's rows in the output's row layout
                int64_t per_image = 1;
                for (int64_t d = 1; d < *axis; ++d) per_image *= x.shape(d);
                c.group = per_image;
                c.group_stride = x.strides(0);
            } else {
                c.keep = py::module_::import("numpy").attr("ascontiguousarray")(x);
                c.x.data = static_cast<const uint8_t*>(c.keep.data());
            }
        }
        out.push_back(std::move(c));
    }
    return out;
}

void int8_check_packed(const Array<int8_t>& packed, const Array<int32_t>& sums, int64_t groups,
                       int64_t n, int64_t k, const char* op) {
    // n at most the bytes there are (packed_size(n, k) >= n), so that no size below overflows
    if (groups < 1 || n < 1 || k < 1 || n > packed.size()) {
        throw std::invalid_argument(std::string(op) + ": N " + std::to_string(n) + " and K " +
                                    std::to_string(k) + " must be >= 1, N at most the " +
                                    std::to_string(packed.size()) + " packed bytes");
    }
    const int64_t want = checked_mul(groups,
                                     checked_mul(int8::round_up(n, int8::kPanel),
                                                 int8::round_up(k, int8::kGroup), op,
                                                 "the packed weights"),
                                     op, "the packed weights");
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

// x (N, C, H, W) pooled: window_2d's checks, padding at most half the kernel (PyTorch's rule:
// every window holds a pixel); `op` names the binding.
int8::PoolGeom int8_pool_geom(const char* op, const py::array& x, Pair k, Pair s, Quad p) {
    if (x.ndim() != 4) {
        throw std::invalid_argument(std::string(op) + ": x must be (N, C, H, W), got " +
                                    shape_str(x));
    }
    const Window2d out = window_2d(op, dims_of(x), k, s, p, {1, 1}, PadRule::half_extent);
    return {x.shape(0) * x.shape(1), x.shape(2), x.shape(3), k.first, k.second, s.first,
            s.second, std::get<0>(p), std::get<1>(p), std::get<2>(p), std::get<3>(p), out.oh,
            out.ow};
}

void bind_int8_gemm(py::module_& m) {
    py::module_ testing = testing_of(m);
    testing.def("int8_vnni_peak", &int8::vnni_peak, py::arg("steps"),
          py::call_guard<py::gil_scoped_release>(),
          "int8 operations per second of a register-only vpdpbusd loop (steps x 12 "
          "instructions on every thread): the VNNI peak; RuntimeError without VNNI");
    testing.def("int8_avx2_peak", &int8::avx2_peak, py::arg("steps"),
          py::call_guard<py::gil_scoped_release>(),
          "int8 operations per second of a register-only vpmaddwd + vpaddd loop (the exact "
          "AVX2 product; steps x 6 pairs on every thread); RuntimeError without AVX2");
    testing.def("int8_avxvnni_peak", &int8::avxvnni_peak, py::arg("steps"),
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
    m.def("int8_concat", [](const std::vector<py::array>& parts, const std::vector<int>& zps,
                            const std::vector<int32_t>& mults, const std::vector<int>& shifts,
                            int out_zp, bool out_signed, int64_t axis, bool shuffle) {
        const std::vector<ConcatPart> in =
            concat_parts(parts, zps, mults, shifts, out_zp, out_signed, &axis, shuffle);
        const py::array& first = parts[0];
        std::vector<py::ssize_t> shape(first.shape(), first.shape() + first.ndim());
        int64_t outer = 1;
        for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
        int64_t inner = 1;  // per output row: the parts' rows side by side
        for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
        shape[axis] = 0;
        for (const py::array& x : parts) shape[axis] += x.shape(axis);
        const int64_t out_inner = inner * shape[axis];
        py::array out = int8_output(out_signed, shape);
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int64_t offset = 0;
        for (size_t i = 0; i < in.size(); ++i) {
            const ConcatPart& c = in[i];
            if (shuffle) {
                // rows (n, j) of h * w go to output channel j * parts + i
                const int64_t k = parts[i].shape(1), hw = inner;
                int8::PartRows rows{outer * k, hw, c.group ? c.group * k : outer * k,
                                    c.group_stride};
                int8::concat_part(c.x, rows, c.mult, c.shift, out_zp, out_signed, o + i * hw,
                                  hw * static_cast<int64_t>(in.size()));
                continue;
            }
            const int64_t part_inner = parts[i].shape(axis) * inner;
            int8::PartRows rows{outer, part_inner, c.group ? c.group : outer, c.group_stride};
            int8::concat_part(c.x, rows, c.mult, c.shift, out_zp, out_signed, o + offset,
                              out_inner);
            offset += part_inner;
        }
        return out;
    }, "parts u8/s8, each requantized (zero point, multiplier, shift) to the output's zero "
       "point and joined along axis; shuffle: parts (N, k, H, W) of one shape interleaved "
       "along axis 1 (channel_shuffle after the concat)");
    m.def("int8_max_pool2d", [](const py::array& x, Pair k, Pair s, Quad p) {
        const int8::PoolGeom g = int8_pool_geom("int8_max_pool2d", x, k, s, p);
        const int8::QIn in = int8_input(x, 0, "int8_max_pool2d");
        py::array out = int8_output(in.is_signed, {x.shape(0), x.shape(1), g.oh, g.ow});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::max_pool2d(in, g, o);
        return out;
    });
    m.def("int8_max_pool2d_nhwc", [](const py::array& x, Pair k, Pair s, Quad p) {
        if (x.ndim() != 4) {
            throw std::invalid_argument("int8_max_pool2d_nhwc: x must be (N, H, W, C), got " +
                                        shape_str(x));
        }
        // the pool geometry of x seen as (N, C, H, W), then per image
        const int64_t c = x.shape(3);
        const py::array nchw = x.attr("transpose")(0, 3, 1, 2);
        int8::PoolGeom g = int8_pool_geom("int8_max_pool2d_nhwc", nchw, k, s, p);
        g.planes = x.shape(0);
        const int8::QIn in = int8_input(x, 0, "int8_max_pool2d_nhwc");
        py::array out = int8_output(in.is_signed, {x.shape(0), g.oh, g.ow, c});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::max_pool2d_nhwc(in, g, c, o);
        return out;
    }, "x u8/s8 (N, H, W, C) C-contiguous -> (N, OH, OW, C): max_pool2d channels-last");
    m.def("int8_avg_pool_global_nhwc", [](const py::array& x, int zp) {
        if (x.ndim() != 4) {
            throw std::invalid_argument("int8_avg_pool_global_nhwc: x must be (N, H, W, C), got " +
                                        shape_str(x));
        }
        const int8::QIn in = int8_input(x, zp, "int8_avg_pool_global_nhwc");
        const int64_t n = x.shape(0), hw = x.shape(1) * x.shape(2), c = x.shape(3);
        // int32 sums of up to 2^23 bytes (255 x 2^23 < 2^31)
        if (hw < 1 || hw > (int64_t{1} << 23)) {
            throw std::invalid_argument("int8_avg_pool_global_nhwc: x " + shape_str(x) +
                                        " must have 1 to 2^23 pixels an image");
        }
        py::array out = int8_output(in.is_signed, {n, c, 1, 1});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::avg_pool_global_nhwc(in, n, hw, c, o);
        return out;
    }, "x u8/s8 (N, H, W, C) C-contiguous, zero point -> (N, C, 1, 1): avg_pool2d over all "
       "pixels, channels-last");
    m.def("int8_to_channels_last", [](const py::array& x) {
        if (x.ndim() != 4) {
            throw std::invalid_argument("int8_to_channels_last: x must be (N, C, H, W), got " +
                                        shape_str(x));
        }
        const int8::QIn in = int8_input(x, 0, "int8_to_channels_last");
        py::array out = int8_output(in.is_signed, {x.shape(0), x.shape(2), x.shape(3),
                                                   x.shape(1)});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        int8::to_channels_last(in.data, x.shape(0), x.shape(1), x.shape(2), x.shape(3),
                               int8::Border{0, 0, 0, 0, 0}, o);
        return out;
    }, "x u8/s8 (N, C, H, W) C-contiguous -> the same values as (N, H, W, C)");
    m.def("int8_avg_pool2d", [](const py::array& x, int zp, Pair k, Pair s, Quad p,
                                bool include_pad) {
        const int8::PoolGeom g = int8_pool_geom("int8_avg_pool2d", x, k, s, p);
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
    bind_int8_tiles(m);
    bind_int8_eltwise(m);
    bind_fake_quant(m);
}

}  // namespace bind
}  // namespace tianyuan
