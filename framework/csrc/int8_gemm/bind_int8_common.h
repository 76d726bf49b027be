// pybind11 glue shared by the int8 bindings (bind_int8.cpp: GEMM, linear, elementwise,
// pooling; bind_int8_conv.cpp: convolutions): the input, output and requantization
// arguments, each checked with the op's name, the shape or the value in its message.
#pragma once

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_gemm.h"
#include "int8_gemm/int8_ops.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {

inline int8::QIn int8_input(const py::array& x, int zero_point, const char* op,
                            bool contiguous = true) {
    const bool s8 = has_dtype<int8_t>(x);
    if (!s8 && !has_dtype<uint8_t>(x)) {
        throw std::invalid_argument(std::string(op) + ": input must be uint8 or int8, got " +
                                    std::string(py::str(x.dtype())));
    }
    if (contiguous && !(x.flags() & py::array::c_style)) {
        throw std::invalid_argument(std::string(op) + ": input " + shape_str(x) +
                                    " must be C-contiguous");
    }
    return {static_cast<const uint8_t*>(x.data()), s8, zero_point};
}

inline py::array int8_output(bool out_signed, std::vector<py::ssize_t> shape) {
    return py::array(out_signed ? py::dtype::of<int8_t>() : py::dtype::of<uint8_t>(), shape);
}

// Per-channel bias/multiplier/shift of length n; output bounds with relu folded in.
inline int8::Requant int8_requant(const Array<int32_t>& bias, const Array<int32_t>& mult,
                                  const Array<int32_t>& shift, int64_t n, int zp, bool relu,
                                  bool out_signed, const char* op, int out_max = 255) {
    const std::string name(op);
    if (bias.size() != n || mult.size() != n || shift.size() != n) {
        throw std::invalid_argument(name + ": bias/multiplier/shift need " + std::to_string(n) +
                                    " entries each, got " + std::to_string(bias.size()) + ", " +
                                    std::to_string(mult.size()) + ", " +
                                    std::to_string(shift.size()));
    }
    for (int64_t j = 0; j < n; ++j) {
        if (shift.data()[j] < 1 || shift.data()[j] > 62) {
            throw std::invalid_argument(name + ": shift must be in [1, 62], got " +
                                        std::to_string(shift.data()[j]) + " for channel " +
                                        std::to_string(j));
        }
    }
    const int lo = out_signed ? -128 : 0, hi = out_signed ? 127 : 255;
    if (zp < lo || zp > hi) {
        throw std::invalid_argument(name + ": output zero point " + std::to_string(zp) +
                                    " is outside [" + std::to_string(lo) + ", " +
                                    std::to_string(hi) + "]");
    }
    // out_max (ReLU6) lowers the upper bound; it never goes below the lower one
    const int floor = relu ? zp : lo;
    const int top = out_max < hi ? (out_max > floor ? out_max : floor) : hi;
    return {bias.data(), mult.data(), shift.data(), 1, zp, floor, top, out_signed};
}

// The int8 convolutions' weight checks (bind_int8_checks.cpp): the packed layout's sizes
// (groups * OC/groups * Kp bytes, the sums), the narrow form (int8_split_narrow's arrays)
// against the packed weights' size, OC and Kp, and K = C/groups x kh x kw of a weight shape
// (OC, C/groups, kh, kw) in `groups` groups, at most 65793 so that the s32 sums cannot
// overflow.
void int8_check_conv_packed(const Array<int8_t>& packed, const Array<int32_t>& sums,
                            int64_t groups, int64_t n, int64_t k);
using NarrowArrays = std::tuple<Array<int8_t>, Array<int32_t>, Array<int32_t>>;
int8::NarrowWeights int8_check_narrow(const NarrowArrays& n, int64_t packed_size, int64_t oc,
                                      int64_t kp);
int64_t int8_weights_k(Quad wshape, int64_t groups, const char* op);

// The convolutions' bindings (bind_int8_conv.cpp), the AMX helpers' (bind_int8_tiles.cpp) and
// fake quantization's for QAT (bind_fake_quant.cpp), added by bind_int8.
void bind_int8_conv(py::module_& m);
void bind_int8_tiles(py::module_& m);
void bind_fake_quant(py::module_& m);

}  // namespace bind
}  // namespace tianyuan
