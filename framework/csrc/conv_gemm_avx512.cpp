// AVX-512 register block for the direct GEMM convolution (conv_gemm.h): kMr rows of output
// channels by 32 positions held in 2 * kMr zmm accumulators; per reduction row, two vector
// loads of positions and one broadcast of a packed weight per row. Tails use masked
// loads and stores (masked-off lanes never fault).
#include <immintrin.h>

#include "conv_gemm.h"

namespace tianyuan {
namespace {

inline __mmask16 lanes(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

template <int MR>
void block(const float* a, const float* b, int64_t ldb, int64_t kc, float* out,
           int64_t ldc, int64_t nvalid, bool first, bool last, const float* scale,
           const float* shift, int act) {
    const __mmask16 m0 = lanes(nvalid), m1 = lanes(nvalid - 16);
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
        acc[r][0] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, out + r * ldc);
        acc[r][1] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, out + r * ldc + 16);
    }
    for (int64_t k = 0; k < kc; ++k) {
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + k * ldb);
        const __m512 b1 = _mm512_maskz_loadu_ps(m1, b + k * ldb + 16);
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            const __m512 ar = _mm512_set1_ps(a[k * kConvGemmMr + r]);
            acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
        for (int h = 0; h < 2; ++h) {
            __m512 v = acc[r][h];
            if (last) {
                if (scale) v = _mm512_mul_ps(v, _mm512_set1_ps(scale[r]));
                if (shift) v = _mm512_add_ps(v, _mm512_set1_ps(shift[r]));
                if (act >= 1) v = _mm512_max_ps(v, zero);
                if (act == 2) v = _mm512_min_ps(v, six);
            }
            _mm512_mask_storeu_ps(out + r * ldc + 16 * h, h ? m1 : m0, v);
        }
    }
}

using Block = void (*)(const float*, const float*, int64_t, int64_t, float*, int64_t, int64_t,
                       bool, bool, const float*, const float*, int);
static_assert(kConvGemmMr == 12, "one block<> per row count");
constexpr Block kBlocks[kConvGemmMr] = {block<1>, block<2>, block<3>, block<4>,  block<5>,
                                        block<6>, block<7>, block<8>, block<9>, block<10>,
                                        block<11>, block<12>};

void kernel(const float* a, const float* b, int64_t ldb, int64_t kc, float* out, int64_t ldc,
            int64_t mr, int64_t nvalid, bool first, bool last, const float* scale,
            const float* shift, int act) {
    kBlocks[mr - 1](a, b, ldb, kc, out, ldc, nvalid, first, last, scale, shift, act);
}

}  // namespace

ConvGemmKernel conv_gemm_kernel_avx512() { return kernel; }

}  // namespace tianyuan
