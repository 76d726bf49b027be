// pybind11 glue: int8 convolutions (framework/csrc/int8_cgemm/int8_cgemm.h, int8_amx.h, int8_ops.h):
// the weight packers, conv2d (packed, direct, AMX, narrow form) and depthwise.
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/cpu.h"
#include "int8_amx/int8_amx.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_cgemm/int8_cgemm_blocks.h"
#include "int8_conv/int8_conv_nhwc.h"
#include "int8_gemm/int8_ops.h"

#include "int8_gemm/bind_int8_common.h"

namespace tianyuan {
namespace bind {
namespace {

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

// The geometry of x (N, C, H, W) against weights of shape wshape (OC, C/groups, kh, kw), taken
// by int8_weights_k: C = C/groups x groups, then window_2d's checks (any padding, as
// PyTorch's: the engines take windows wholly in the padding); op names the binding in the
// messages.
int8::ConvGeom int8_geom(const py::array& x, Quad wshape, Pair stride, Quad pad, Pair dil,
                         int64_t groups, const char* op) {
    if (x.ndim() != 4) {
        throw std::invalid_argument(std::string(op) + ": x must be (N, C, H, W), got " +
                                    shape_str(x));
    }
    const auto [oc, cg, kh, kw] = wshape;
    const auto [pt, pb, pl, pr] = pad;
    if (groups < 1 || oc % groups || x.shape(1) != cg * groups) {
        throw std::invalid_argument(std::string(op) + ": input " + shape_str(x) + " has " +
                                    std::to_string(x.shape(1)) + " channels, weights " +
                                    dims_of(wshape).str() + " in " + std::to_string(groups) +
                                    " groups take " + std::to_string(cg * groups));
    }
    Window2d out{};
    try {
        out = window_2d(op, dims_of(x), {kh, kw}, stride, pad, dil, PadRule::any);
    } catch (const std::invalid_argument& e) {  // the message, naming the weights and groups
        std::string what = e.what();
        const std::string lead = std::string(op) + ": ", tail = " (input " + shape_str(x) + ")";
        if (what.rfind(lead, 0) == 0) what.erase(0, lead.size());
        if (what.size() > tail.size() && what.compare(what.size() - tail.size(), tail.size(),
                                                      tail) == 0) {
            what.erase(what.size() - tail.size());
        }
        throw std::invalid_argument(lead + "input " + shape_str(x) + ", weights " +
                                    dims_of(wshape).str() + ", groups " +
                                    std::to_string(groups) + ": " + what);
    }
    return {x.shape(0), x.shape(1), x.shape(2), x.shape(3), oc, kh, kw, stride.first,
            stride.second, dil.first, dil.second, pt, pb, pl, pr, groups, out.oh, out.ow};
}

// A convolution with everything but its input fixed and checked once, so that a call converts two
// arguments where a function of them all had converted 19 (half a small layer's call:
// bench/RESULTS.md, threads, memory and the process). Errors name int8_conv2d or
// int8_depthwise_conv2d. The arrays are held, so the pointers in `r` and `nw` stay valid; whether
// the narrow form is read is decided per call, by the ISA then current, as int8::conv2d does.
// depthwise: w is the raw (OC, 1, kh, kw) weights for int8::depthwise_conv2d, else packed conv
// weights.
class Int8Conv {
  public:
    Int8Conv(bool depthwise, const Array<int8_t>& w, const std::optional<Array<int32_t>>& sums,
             Quad wshape, const Array<int32_t>& bias, const Array<int32_t>& mult,
             const Array<int32_t>& shift, int out_zp, bool relu, bool out_signed, int out_max,
             Pair stride, Quad pad, Pair dil, int64_t groups, int algo,
             const std::optional<Array<int8_t>>& amx, const std::optional<NarrowArrays>& narrow,
             const std::optional<Array<int8_t>>& nhwc)
        : depthwise_(depthwise), op_(depthwise ? "int8_depthwise_conv2d" : "int8_conv2d"),
          w_(w), bias_(bias), mult_(mult), shift_(shift), wshape_(wshape), stride_(stride),
          pad_(pad), dil_(dil), groups_(groups), algo_(algo), amx_(amx), narrow_(narrow),
          nhwc_(nhwc) {
        const auto [oc, cg, kh, kw] = wshape;
        if (depthwise) {
            if (w.ndim() != 4 || w.shape(1) != 1) {
                throw std::invalid_argument("int8_depthwise_conv2d: w must be (OC, 1, kh, kw), "
                                            "got " + shape_str(w));
            }
            wshape_ = {w.shape(0), 1, w.shape(2), w.shape(3)};
            int8_weights_k(wshape_, 1, op_);
            const int64_t n = w.shape(0), kh = w.shape(2), kw = w.shape(3);
            dw_words_.resize(static_cast<size_t>(n * kh * int8::depthwise_words_per_row(kw)));
            dw_sums_.resize(static_cast<size_t>(n));
            int8::depthwise_consts(w.data(), n, kh, kw, dw_words_.data(), dw_sums_.data());
        } else {
            if (algo < 0 || algo > 4) {
                throw std::invalid_argument("int8_conv2d: algo must be 0 (automatic), 1 "
                                            "(packed), 2 (direct), 3 (amx) or 4 (packed_amx), "
                                            "got " +
                                            std::to_string(algo));
            }
            const int64_t k = int8_weights_k(wshape, groups, op_);
            if (!sums) throw std::invalid_argument("int8_conv2d: the row sums are missing");
            sums_ = *sums;
            int8_check_conv_packed(w, sums_, groups, oc / groups, k);
            if (amx && amx->size() != int8::amx_packed_size(oc, cg * groups, kh * kw)) {
                throw std::invalid_argument("int8_conv2d: AMX weights have " +
                                            std::to_string(amx->size()) + " bytes, expected " +
                                            std::to_string(oc * cg * groups * kh * kw));
            }
            if (narrow_) {
                nw_ = int8_check_narrow(*narrow_, w.size(), oc, int8::round_up(k, int8::kGroup));
            }
            if (nhwc_ && (groups != 1 ||
                          nhwc_->size() != int8::nhwc_packed_size(oc, cg, kh, kw))) {
                throw std::invalid_argument(
                    "int8_conv2d: channels-last weights of " + std::to_string(nhwc_->size()) +
                    " bytes for groups " + std::to_string(groups) + ", C " + std::to_string(cg) +
                    " (groups 1 only), expected " +
                    std::to_string(int8::nhwc_packed_size(oc, cg, kh, kw)));
            }
            // the packed_amx algorithm's weights, once, where it may run (int8_amx.h)
            const CpuFeatures& cpu = cpu_features();
            const int64_t kp = int8::round_up(cg * kh * kw, int8::kGroup);
            if (int8::amx_gemm_takes(groups) && cpu.os_avx512 &&
                (algo == 4 || (algo == 0 && cpu.os_amx &&
                               int8::amx_gemm_may_win(oc, cg * groups, kh * kw, groups)))) {
                gemm_.resize(static_cast<size_t>(int8::amx_gemm_size(oc, kp)));
                int8::amx_gemm_weights(w.data(), oc, kp, gemm_.data());
            }
            // the channels-last rows form's (the stem's), likewise
            int8::ConvGeom wg{};
            wg.c = cg;
            wg.oc = oc;
            wg.kh = kh;
            wg.kw = kw;
            wg.dh = std::get<0>(dil);
            wg.dw = std::get<1>(dil);
            wg.groups = groups;
            if (int8::amx_rows_takes(wg) && cpu.os_avx512 && cpu.avx512vbmi &&
                (algo == 3 || (algo == 0 && cpu.os_amx && int8::amx_rows_wins(wg)))) {
                rows_.resize(static_cast<size_t>(int8::amx_rows_size(oc, cg, kh, kw)));
                int8::amx_rows_weights(w.data(), oc, cg, kh, kw, rows_.data());
            }
        }
        r_ = int8_requant(bias_, mult_, shift_, std::get<0>(wshape_), out_zp, relu, out_signed,
                          op_, out_max);
        if (nhwc_) {  // the channels-last engine's requantization constants (int8_conv_nhwc.h)
            nhwc_q_.resize(static_cast<size_t>(int8::nhwc_blocks(oc)));
            int8::nhwc_block_q(r_, oc, nhwc_q_.data());
        }
    }

    py::array operator()(const py::array& x, int zp) const {
        const int64_t groups = depthwise_ ? (x.ndim() == 4 ? x.shape(1) : 1) : groups_;
        const int8::ConvGeom g = int8_geom(x, wshape_, stride_, pad_, dil_, groups, op_);
        const int8::QIn in = int8_input(x, zp, op_);
        py::array out = int8_output(r_.out_signed, {g.n, g.oc, g.oh, g.ow});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        if (depthwise_) {
            int8::depthwise_conv2d(in, g, w_.data(), bias_.data(), r_, o, dw_words_.data(),
                                   dw_sums_.data());
        } else {
            int8::conv2d(in, g, w_.data(), sums_.data(), bias_.data(), r_, o,
                         static_cast<int8::ConvAlgo>(algo_), amx_ ? amx_->data() : nullptr,
                         narrow_ ? &nw_ : nullptr, gemm_.empty() ? nullptr : gemm_.data());
        }
        return out;
    }

    // x u8 (N, C, H, W) with its channels side by side (channels-last, any other strides), or
    // C-contiguous (an image: copied channels-last here, padded with zp, so that no tile is on
    // the border: cheaper than the padding's tables, bench/RESULTS.md) -> (N, OH, OW, OC):
    // int8_conv_nhwc.h (needs the channels-last weights), or AMX tiles where the layer takes
    // them (amx weights; algo 3, or the automatic choice on the amx ISA): int8_amx.h, the
    // planes copied from channels-last rows (or transposed from C-contiguous ones), the
    // accumulator rows stored as the positions' runs.
    py::array channels_last(const py::array& x, int zp) const {
        const char* op = "int8_conv2d (channels-last)";
        const auto refuse = [&] {
            return std::invalid_argument(
                std::string(op) + ": made without channels-last weights (weights (" +
                std::to_string(std::get<0>(wshape_)) + ", " + std::to_string(std::get<1>(wshape_)) +
                ", " + std::to_string(std::get<2>(wshape_)) + ", " +
                std::to_string(std::get<3>(wshape_)) + "), groups " + std::to_string(groups_) +
                ": the engine takes groups 1, and PreparedConv packs for it only on the ISAs "
                "that run it)");
        };
        if (groups_ != 1 || (!nhwc_ && !amx_ && rows_.empty())) throw refuse();
        const int8::ConvGeom g = int8_geom(x, wshape_, stride_, pad_, dil_, 1, op);
        const int64_t strides[4] = {x.strides(0), x.strides(1), x.strides(2), x.strides(3)};
        const bool nchw = strides[1] != 1 && g.c > 1;
        const CpuFeatures& cpu = cpu_features();
        const bool run_amx = algo_ == 3 || (algo_ == 0 && int8::amx_automatic());
        const bool amx = amx_ && int8::amx_takes(g) && cpu.os_avx512 && cpu.avx512vbmi &&
                         run_amx;
        // the rows form reads C-contiguous x (rows_ is made only where it may run)
        const bool rows = !rows_.empty() && nchw && run_amx &&
                          (algo_ == 3 || int8::amx_rows_wins(g));
        if (!nhwc_ && !amx && !rows) throw refuse();
        const int8::QIn in = int8_input(x, zp, op, false);
        if (in.is_signed) {
            throw std::invalid_argument(std::string(op) + ": input must be uint8, got int8");
        }
        if (nchw && !(x.flags() & py::array::c_style)) {
            throw std::invalid_argument(
                std::string(op) + ": input " + shape_str(x) + " with strides (" +
                std::to_string(strides[0]) + ", " + std::to_string(strides[1]) + ", " +
                std::to_string(strides[2]) + ", " + std::to_string(strides[3]) +
                ") must have its channels side by side, or be C-contiguous");
        }
        // C-contiguous x's padded channels-last copy (the plane is within kMaxPlane)
        const int64_t padded = checked_mul(checked_mul(g.n, g.c, op, "the padded copy"),
                                           (g.h + g.pt + g.pb) * (g.w + g.pl + g.pr), op,
                                           "the padded copy");
        py::array out = int8_output(r_.out_signed, {g.n, g.oh, g.ow, g.oc});
        auto* o = static_cast<uint8_t*>(out.mutable_data());
        py::gil_scoped_release unlocked;
        if (rows) {
            const std::vector<int32_t> b =
                int8::corrected_bias(bias_.data(), sums_.data(), g.oc, zp);
            int8::conv2d_amx_rows(in.data, static_cast<uint8_t>(zp), g, rows_.data(), b.data(), r_,
                                  o, !cpu.os_amx);
            return out;
        }
        if (amx) {
            const std::vector<int32_t> b =
                int8::corrected_bias(bias_.data(), sums_.data(), g.oc, zp);
            int8::conv2d_amx(in.data, 0, static_cast<uint8_t>(zp), g, amx_->data(), b.data(), r_,
                             o, !cpu.os_amx, nchw ? nullptr : strides, true);
            return out;
        }
        if (!nchw) {
            int8::conv2d_nhwc(in.data, strides, zp, g, nhwc_->data(), sums_.data(), r_,
                              nhwc_q_.data(), o);
            return out;
        }
        int8::ConvGeom gp = g;  // the padded copy's geometry: the same output, no padding
        gp.h += g.pt + g.pb;
        gp.w += g.pl + g.pr;
        gp.pt = gp.pb = gp.pl = gp.pr = 0;
        std::unique_ptr<uint8_t[]> xp(new uint8_t[padded]);
        int8::to_channels_last(in.data, g.n, g.c, g.h, g.w,
                               {g.pt, g.pb, g.pl, g.pr, static_cast<uint8_t>(zp)}, xp.get());
        const int64_t ps[4] = {gp.h * gp.w * g.c, 1, gp.w * g.c, g.c};
        int8::conv2d_nhwc(xp.get(), ps, zp, gp, nhwc_->data(), sums_.data(), r_, nhwc_q_.data(),
                          o);
        return out;
    }

  private:
    bool depthwise_;
    const char* op_;
    Array<int8_t> w_;
    Array<int32_t> sums_, bias_, mult_, shift_;
    Quad wshape_;
    Pair stride_;
    Quad pad_;
    Pair dil_;
    int64_t groups_;
    int algo_;
    std::optional<Array<int8_t>> amx_;
    std::optional<NarrowArrays> narrow_;
    std::optional<Array<int8_t>> nhwc_;
    int8::NarrowWeights nw_{};
    std::vector<int32_t> dw_words_, dw_sums_;  // depthwise: the weights' depthwise_consts
    std::vector<int8_t> gemm_;                  // the packed_amx algorithm's weights, or empty
    std::vector<int8_t> rows_;                  // the AMX rows form's (channels-last), or empty
    std::vector<int8::NhwcBlockQ> nhwc_q_;      // with nhwc_: its blocks' requantization
    int8::Requant r_{};
};

}  // namespace

void bind_int8_conv(py::module_& m) {
    m.def("int8_pack_conv_weights", &int8_pack_conv, py::arg("w"),
          "w s8 (G, OC/G, C/G, kh*kw) -> (packed s8, row_sums s32 (OC,)); layout in "
          "int8_cgemm.h");
    py::class_<Int8Conv>(m, "Int8Conv",
                         "An int8 convolution with all but its input x (N, C, H, W) and its "
                         "zero point fixed: Int8Conv(...)(x, zp); see bind_int8_conv.cpp")
        .def(py::init<bool, const Array<int8_t>&, const std::optional<Array<int32_t>>&, Quad,
                      const Array<int32_t>&, const Array<int32_t>&, const Array<int32_t>&, int,
                      bool, bool, int, Pair, Quad, Pair, int64_t, int,
                      const std::optional<Array<int8_t>>&,
                      const std::optional<NarrowArrays>&,
                      const std::optional<Array<int8_t>>&>(),
             py::arg("depthwise"), py::arg("w"), py::arg("sums"), py::arg("wshape"),
             py::arg("bias"), py::arg("mult"), py::arg("shift"), py::arg("out_zp"),
             py::arg("relu"), py::arg("out_signed"), py::arg("out_max"), py::arg("stride"),
             py::arg("pad"), py::arg("dil"), py::arg("groups"), py::arg("algo") = 0,
             py::arg("amx") = py::none(), py::arg("narrow") = py::none(),
             py::arg("nhwc") = py::none())
        .def("__call__", &Int8Conv::operator(), py::arg("x"), py::arg("zp"))
        .def("channels_last", &Int8Conv::channels_last, py::arg("x"), py::arg("zp"),
             "x uint8 (N, C, H, W), channels-last or C-contiguous (copied channels-last, "
             "padded with zp) -> (N, OH, OW, OC): the channels-last engine (int8_conv_nhwc.h); "
             "groups 1");
    m.def("int8_pack_conv_weights_nhwc", [](const Array<int8_t>& w) {
        if (w.ndim() != 4) {
            throw std::invalid_argument("int8_pack_conv_weights_nhwc: w must be (OC, C, kh, kw), "
                                        "got " + shape_str(w));
        }
        const int64_t oc = w.shape(0), c = w.shape(1), kh = w.shape(2), kw = w.shape(3);
        Array<int8_t> out(int8::nhwc_packed_size(oc, c, kh, kw));
        int8::nhwc_pack_weights(w.data(), oc, c, kh, kw, out.mutable_data());
        return out;
    }, py::arg("w"), "w s8 (OC, C, kh, kw) -> the channels-last engine's blocks "
                     "(int8_conv_nhwc.h)");
    m.def("int8_nhwc_fast", &int8::nhwc_fast,
          "whether the current ISA runs the channels-last engine on its VNNI tile (else "
          "the generic one)");
    m.def("int8_narrow_tile", &int8::narrow_tile,
          "whether the current ISA's convolution tile reads the narrow form (int8_cgemm.h)");
    m.def("int8_split_narrow", [](const Array<int8_t>& packed, int64_t groups, int64_t ocg,
                                  int64_t kp) {
        if (groups < 1 || ocg < 1 || kp < 1 || kp % int8::kGroup ||
            packed.size() != checked_mul(checked_mul(groups, ocg, "int8_split_narrow", "OC"),
                                         kp, "int8_split_narrow", "the packed weights")) {
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
}

}  // namespace bind
}  // namespace tianyuan
