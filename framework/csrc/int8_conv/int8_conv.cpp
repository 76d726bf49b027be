// int8 linear on packed weights: the dispatched GEMM into s32 (M, Np) and requantization
// with the zero-point correction folded into the bias. Convolution itself lives in
// int8_cgemm.cpp, depthwise convolution in int8_depthwise.cpp.
#include <memory>
#include <vector>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_cgemm/int8_cgemm_blocks.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {
namespace {

// x (M, K) as GEMM rows (M, kp) u8: x itself when it is u8 and K % 4 == 0, else a copy
// in `buf` with the sign bit flipped for signed input and zeros past K.
const uint8_t* as_rows(const QIn& x, int64_t m, int64_t k, int64_t kp,
                       std::vector<uint8_t>& buf) {
    if (!x.is_signed && k == kp) return x.data;
    buf.assign(static_cast<size_t>(m * kp), 0);
    const uint8_t flip = flip_of(x);
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t q = 0; q < k; ++q) buf[i * kp + q] = x.data[i * k + q] ^ flip;
    }
    return buf.data();
}

// Uninitialised s32 scratch (value-initialising a std::vector would touch it twice).
std::unique_ptr<int32_t[]> scratch(int64_t size) {
    return std::unique_ptr<int32_t[]>(new int32_t[static_cast<size_t>(size)]);
}

}  // namespace

void gemm_s32(const QIn& x, int64_t m, int64_t k, const int8_t* packed, const int32_t* row_sums,
              int64_t n, int32_t* c) {
    const int64_t kp = round_up(k, kGroup);
    const int64_t np = round_up(n, kPanel);
    std::vector<uint8_t> buf;
    const uint8_t* rows = as_rows(x, m, k, kp, buf);
    const std::unique_ptr<int32_t[]> acc = scratch(m * np);
    gemm_u8s8s32(rows, kp, m, packed, n, k, acc.get(), np);
    const std::vector<int32_t> fix = corrected_bias(nullptr, row_sums, n, zero_of(x));
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            c[i * n + j] = static_cast<int32_t>(static_cast<uint32_t>(acc[i * np + j]) +
                                                static_cast<uint32_t>(fix[j]));
        }
    }
}

void linear(const QIn& x, int64_t m, int64_t k, const int8_t* packed, const int32_t* row_sums,
            int64_t n, const int32_t* bias, const Requant& r, uint8_t* out) {
    const int64_t kp = round_up(k, kGroup);
    const int64_t np = round_up(n, kPanel);
    std::vector<uint8_t> buf;
    const uint8_t* rows = as_rows(x, m, k, kp, buf);
    const std::unique_ptr<int32_t[]> acc = scratch(m * np);
    gemm_u8s8s32(rows, kp, m, packed, n, k, acc.get(), np);
    const std::vector<int32_t> b = corrected_bias(bias, row_sums, n, zero_of(x));
    Requant rq = r;
    rq.bias = b.data();
    rq.step = 1;
    requantize(acc.get(), np, m, n, rq, false, out, n);
}

}  // namespace int8
}  // namespace tianyuan
