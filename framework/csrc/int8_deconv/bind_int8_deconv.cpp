// pybind11 glue: the int8 transposed convolution (int8_deconv.h). Int8Deconv takes the packed
// weights, the geometry but the input's and the requantization once, checked; a call checks
// the input against them (shape, dtype, zero point) before any pointer is formed, so that no
// crafted shape reads or writes outside a buffer. Errors are ValueError naming the argument.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "int8_deconv/int8_deconv.h"

#include "int8_gemm/bind_int8_common.h"

namespace tianyuan {
namespace bind {
namespace {

constexpr const char* kOp = "int8_conv_transpose2d";

[[noreturn]] void refuse(const std::string& what) {
    throw std::invalid_argument(std::string(kOp) + ": " + what);
}

std::string pair_str(Pair p) {
    return "(" + std::to_string(p.first) + ", " + std::to_string(p.second) + ")";
}

// Weights (C, OC/groups, kh, kw) in `groups` groups: every size >= 1, C a multiple of groups,
// C/groups <= 65793 (the s32 sums cannot overflow) and the packed sizes within int64.
void check_weights(Quad wshape, int64_t groups) {
    const auto [c, ocg, kh, kw] = wshape;
    if (c < 1 || ocg < 1 || kh < 1 || kw < 1 || groups < 1 || c % groups) {
        refuse("weights " + dims_of(wshape).str() + " in " + std::to_string(groups) +
               " groups: every size must be >= 1 and C a multiple of groups");
    }
    if (c / groups > 65793) refuse("C/groups = " + std::to_string(c / groups) + " > 65793");
    const int64_t taps = checked_mul(checked_mul(ocg, kh, kOp, "taps"), kw, kOp, "taps");
    checked_mul(checked_mul(int8::round_up(taps, int8::kPanel),
                            int8::round_up(c / groups, int8::kGroup), kOp, "the weights"),
                groups, kOp, "the weights");
}

// One axis of the output: (size - 1) s - p0 - p1 + d (k - 1) + op + 1 in checked int64.
int64_t out_axis(int64_t size, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1,
                 int64_t op, const char* axis) {
    if (s < 1 || d < 1 || p0 < 0 || p1 < 0 || op < 0 || op >= std::max(s, d)) {
        refuse(std::string(axis) + ": stride " + std::to_string(s) + " and dilation " +
               std::to_string(d) + " must be >= 1, padding (" + std::to_string(p0) + ", " +
               std::to_string(p1) + ") >= 0, output_padding " + std::to_string(op) +
               " in [0, max(stride, dilation))");
    }
    const int64_t full = checked_add(checked_mul(size - 1, s, kOp, "the output"),
                                     checked_add(checked_mul(d, k - 1, kOp, "the output"),
                                                 op + 1, kOp, "the output"), kOp, "the output");
    return full - p0 - p1;
}

class Int8Deconv {
  public:
    Int8Deconv(const Array<int8_t>& packed, const Array<int32_t>& sums, Quad wshape,
               int64_t groups, Pair stride, Quad padding, Pair output_padding, Pair dilation,
               const Array<int32_t>& bias, const Array<int32_t>& mult,
               const Array<int32_t>& shift, int out_zp, bool relu, bool out_signed, int out_max)
        : packed_(packed), sums_(sums), bias_(bias), mult_(mult), shift_(shift) {
        check_weights(wshape, groups);
        const auto [c, ocg, kh, kw] = wshape;
        const int64_t taps = int8::deconv_taps(ocg, kh, kw);
        if (packed.size() != groups * int8::deconv_group_bytes(c / groups, ocg, kh, kw) ||
            sums.size() != groups * taps) {
            refuse("packed weights of " + std::to_string(packed.size()) + " bytes and " +
                   std::to_string(sums.size()) + " row sums do not match weights " +
                   dims_of(wshape).str() + " in " + std::to_string(groups) + " groups");
        }
        const auto [pt, pb, pl, pr] = padding;
        g_ = {0, c, 0, 0, ocg * groups, kh, kw, stride.first, stride.second, dilation.first,
              dilation.second, pt, pb, pl, pr, groups, 0, 0};
        op_ = output_padding;
        out_axis(1, kh, stride.first, dilation.first, 0, 0, op_.first, "rows");  // the rules
        out_axis(1, kw, stride.second, dilation.second, 0, 0, op_.second, "columns");
        if (pt < 0 || pb < 0 || pl < 0 || pr < 0) {
            refuse("padding (" + std::to_string(pt) + ", " + std::to_string(pb) + ", " +
                   std::to_string(pl) + ", " + std::to_string(pr) + ") must be >= 0");
        }
        r_ = int8_requant(bias_, mult_, shift_, g_.oc, out_zp, relu, out_signed, kOp, out_max);
    }

    py::array call(const py::array& x, int zero_point) const {
        const int8::QIn q = int8_input(x, zero_point, kOp);
        const int lo = q.is_signed ? -128 : 0, hi = q.is_signed ? 127 : 255;
        if (zero_point < lo || zero_point > hi) {
            refuse("input zero point " + std::to_string(zero_point) + " is outside [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
        }
        const int8::DeconvGeom g = geometry(x);
        py::array out = int8_output(r_.out_signed, {g.n, g.oc, g.oh, g.ow});
        if (g.n == 0) return out;
        py::gil_scoped_release release;
        int8::conv_transpose2d(q, g, packed_.data(), sums_.data(), r_,
                               static_cast<uint8_t*>(out.mutable_data()));
        return out;
    }

  private:
    // x (N, C, H, W) against the weights: the output size and every buffer the kernel sizes
    // from it (the output, a chunk's int32 columns, a row's accumulators) within int64.
    int8::DeconvGeom geometry(const py::array& x) const {
        if (x.ndim() != 4) refuse("x must be (N, C, H, W), got " + shape_str(x));
        if (x.shape(1) != g_.c) {
            refuse("input " + shape_str(x) + " has " + std::to_string(x.shape(1)) +
                   " channels, the weights take " + std::to_string(g_.c));
        }
        if (x.shape(2) < 1 || x.shape(3) < 1) refuse("input " + shape_str(x) + " is empty");
        int8::DeconvGeom g = g_;
        g.n = x.shape(0);
        g.h = x.shape(2);
        g.w = x.shape(3);
        g.oh = out_axis(g.h, g.kh, g.sh, g.dh, g.pt, g.pb, op_.first, "rows");
        g.ow = out_axis(g.w, g.kw, g.sw, g.dw, g.pl, g.pr, op_.second, "columns");
        if (g.oh < 1 || g.ow < 1) {
            refuse("output size " + pair_str({g.oh, g.ow}) + " is not positive: input " +
                   shape_str(x) + ", kernel " + pair_str({g.kh, g.kw}) + ", padding (" +
                   std::to_string(g.pt) + ", " + std::to_string(g.pb) + ", " +
                   std::to_string(g.pl) + ", " + std::to_string(g.pr) + ")");
        }
        const int64_t plane = checked_mul(g.oh, g.ow, kOp, "the output");
        checked_mul(checked_mul(g.n, g.oc, kOp, "the output"), plane, kOp, "the output");
        checked_mul(g.ow, g.oc, kOp, "an output row");
        const int64_t taps = int8::deconv_taps(g.oc / g.groups, g.kh, g.kw);
        const int64_t hw = checked_mul(g.h, g.w, kOp, "the input");
        checked_mul(checked_mul(hw, int8::round_up(taps, int8::kPanel), kOp, "the columns"),
                    4 * g.groups, kOp, "the columns");
        checked_mul(checked_mul(hw, int8::round_up(g.c / g.groups, int8::kGroup), kOp, "rows"),
                    g.groups, kOp, "the rows");
        return g;
    }

    Array<int8_t> packed_;
    Array<int32_t> sums_, bias_, mult_, shift_;
    int8::DeconvGeom g_{};
    Pair op_;
    int8::Requant r_{};
};

py::tuple pack(const Array<int8_t>& w, int64_t groups) {
    if (w.ndim() != 4) refuse("w must be (C, OC/groups, kh, kw), got " + shape_str(w));
    const Quad wshape{w.shape(0), w.shape(1), w.shape(2), w.shape(3)};
    check_weights(wshape, groups);
    const auto [c, ocg, kh, kw] = wshape;
    Array<int8_t> packed(groups * int8::deconv_group_bytes(c / groups, ocg, kh, kw));
    Array<int32_t> sums(groups * int8::deconv_taps(ocg, kh, kw));
    int8::pack_deconv_weights(w.data(), c, ocg, kh, kw, groups, packed.mutable_data(),
                              sums.mutable_data());
    return py::make_tuple(packed, sums);
}

}  // namespace

void bind_int8_deconv(py::module_& m) {
    m.def("int8_pack_deconv_weights", &pack, py::arg("w"), py::arg("groups"),
          "w s8 (C, OC/groups, kh, kw) -> (packed s8, row_sums s32); layout in "
          "int8_deconv/int8_deconv.h");
    py::class_<Int8Deconv>(m, "Int8Deconv",
                           "An int8 transposed convolution with all but its input fixed: "
                           "Int8Deconv(...)(x, zp) -> (N, OC, OH, OW); int8_deconv.h")
        .def(py::init<const Array<int8_t>&, const Array<int32_t>&, Quad, int64_t, Pair, Quad,
                      Pair, Pair, const Array<int32_t>&, const Array<int32_t>&,
                      const Array<int32_t>&, int, bool, bool, int>(),
             py::arg("packed"), py::arg("row_sums"), py::arg("wshape"), py::arg("groups"),
             py::arg("stride"), py::arg("padding"), py::arg("output_padding"),
             py::arg("dilation"), py::arg("bias"), py::arg("multiplier"), py::arg("shift"),
             py::arg("out_zero_point"), py::arg("relu"), py::arg("out_signed"),
             py::arg("out_max"))
        .def("__call__", &Int8Deconv::call, py::arg("x"), py::arg("x_zero_point"));
}

}  // namespace bind
}  // namespace tianyuan
