// Checks of the int8 convolutions' weights, shared by their bindings (bind_int8_conv.cpp):
// the packed layout's sizes, the narrow form's offsets and the K of a weight shape. Each runs
// once, where a convolution takes its weights, and throws std::invalid_argument naming the op.
#include <stdexcept>
#include <string>
#include <tuple>

#include "int8_cgemm/int8_cgemm.h"

#include "int8_gemm/bind_int8_common.h"

namespace tianyuan {
namespace bind {

// Conv layout (int8_cgemm.h): groups * OCg * Kp bytes (the sizes taken by int8_weights_k).
void int8_check_conv_packed(const Array<int8_t>& packed, const Array<int32_t>& sums,
                            int64_t groups, int64_t n, int64_t k) {
    const int64_t want =
        checked_mul(groups * n, int8::round_up(k, int8::kGroup), "int8_conv2d", "the weights");
    if (packed.size() != want || sums.size() != groups * n) {
        throw std::invalid_argument(
            "int8_conv2d: packed weights of " + std::to_string(packed.size()) + " bytes and " +
            std::to_string(sums.size()) + " row sums do not match groups " +
            std::to_string(groups) + " x OC/groups " + std::to_string(n) + " x K " +
            std::to_string(k) + " (" + std::to_string(want) + " bytes)");
    }
}

// The narrow form of conv weights (int8_cgemm.h, NarrowWeights) as int8_split_narrow returns
// it, checked against the packed weights' size, OC and Kp (K rounded up to quads), and its
// residual's row offsets (non-decreasing from 0) and k-quads (below Kp / 4) against what they
// index; once, when the convolution is made.
int8::NarrowWeights int8_check_narrow(const NarrowArrays& n, int64_t packed_size, int64_t oc,
                                      int64_t kp) {
    const auto& [w, ptr, res] = n;
    const int32_t* p = ptr.data();
    bool fits = w.size() == packed_size && ptr.size() == oc + 1 && p[0] == 0 &&
                res.size() == 2 * static_cast<int64_t>(p[oc]);
    for (int64_t j = 0; fits && j < oc; ++j) fits = p[j] <= p[j + 1];
    for (int64_t e = 0; fits && e < res.size() / 2; ++e) {
        fits = res.data()[2 * e] >= 0 && res.data()[2 * e] < kp / int8::kGroup;
    }
    if (!fits) {
        throw std::invalid_argument(
            "int8_conv2d: the narrow form (" + std::to_string(w.size()) + " bytes, " +
            std::to_string(ptr.size()) + " row offsets, " + std::to_string(res.size()) +
            " residual words) does not match the packed weights (" +
            std::to_string(packed_size) + " bytes, OC " + std::to_string(oc) + ", Kp " +
            std::to_string(kp) + ")");
    }
    return {w.data(), ptr.data(), res.data()};
}

// Weights of shape wshape (OC, C/groups, kh, kw) in `groups` groups: every size >= 1, OC a
// multiple of groups, K = C/groups x kh x kw at most 65793 (the s32 sums cannot overflow);
// K. Checked once, where the weights are taken.
int64_t int8_weights_k(Quad wshape, int64_t groups, const char* op) {
    const auto [oc, cg, kh, kw] = wshape;
    if (oc < 1 || cg < 1 || kh < 1 || kw < 1 || groups < 1 || oc % groups) {
        throw std::invalid_argument(std::string(op) + ": weights " + dims_of(wshape).str() +
                                    " in " + std::to_string(groups) + " groups: every size "
                                    "must be >= 1 and OC a multiple of groups");
    }
    const int64_t k = checked_mul(checked_mul(cg, kh, op, "K"), kw, op, "K");
    if (k > 65793) {
        throw std::invalid_argument(std::string(op) + ": K = C/groups x kh x kw = " +
                                    std::to_string(k) + " > 65793 may overflow s32");
    }
    return k;
}

}  // namespace bind
}  // namespace tianyuan
