// Requantization s32 -> u8/s8: the generic row (the reference formula in scalar int64) and
// the threaded driver, on the int8 GEMM family's row (int8_gemm.h, gemm_kernels). SIMD rows
// live in requant_avx2.cpp / requant_avx512.cpp.
#include "int8_gemm/int8_gemm.h"

namespace tianyuan {
namespace int8 {

void requant_row_generic(const int32_t* acc, int64_t n, const Requant& r, uint8_t* out) {
    for (int64_t j = 0; j < n; ++j) {
        const int64_t q = j * r.step;
        out[j] = requant_one(acc[j], r.bias[q], r.multiplier[q], r.shift[q], r);
    }
}

void requantize(const int32_t* acc, int64_t lda, int64_t m, int64_t n, const Requant& r,
                bool per_row, uint8_t* out, int64_t ldo) {
    const auto row = gemm_kernels().requant_row;
#pragma omp parallel for schedule(static) if (m * n > (1 << 16))
    for (int64_t i = 0; i < m; ++i) {
        Requant ri = r;
        if (per_row) {
            ri.bias = r.bias + i * r.step;
            ri.multiplier = r.multiplier + i * r.step;
            ri.shift = r.shift + i * r.step;
            ri.step = 0;
        }
        row(acc + i * lda, n, ri, out + i * ldo);
    }
}

}  // namespace int8
}  // namespace tianyuan
