// AVX2 kernels of the convolution weight gradient (conv_gemm.h): the kWgradMr x kWgradNr
// register block as sub-blocks of 6 rows k by 16 channels (12 ymm accumulators; per position
// two vector loads of gy^T and one broadcast per row from the packed panel, as in the
// forward's AVX2 kernel), and the gather of gy^T rows (8 x 8 blocks transposed in
// registers). Each sum runs over the positions in order with fused multiply-adds, as on
// AVX-512.
#include <immintrin.h>

#include <cstdint>

#include "conv/conv_gemm.h"
#include "conv/transpose_avx2.h"

namespace tianyuan {
namespace {

static_assert(kWgradMr == 12 && kWgradNr == 32, "two passes of 6 rows, two of 16 channels");

void kernel(const float* b, int64_t ldp, const int64_t* nvalid, int64_t npanels,
            const float* at, float* acc, int64_t ldacc) {
    for (int r0 = 0; r0 < kWgradMr; r0 += 6) {
        for (int c0 = 0; c0 < kWgradNr; c0 += 16) {
            __m256 sum[6][2];
#pragma GCC unroll 6
            for (int r = 0; r < 6; ++r) sum[r][0] = sum[r][1] = _mm256_setzero_ps();
            const float* a = at + c0;
            for (int64_t pn = 0; pn < npanels; ++pn) {
                const float* bp = b + pn * ldp + r0 * kConvGemmNr;
                for (int64_t l = 0; l < nvalid[pn]; ++l, a += kWgradNr) {
                    const __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8);
#pragma GCC unroll 6
                    for (int r = 0; r < 6; ++r) {
                        const __m256 br = _mm256_broadcast_ss(bp + r * kConvGemmNr + l);
                        sum[r][0] = _mm256_fmadd_ps(br, a0, sum[r][0]);
                        sum[r][1] = _mm256_fmadd_ps(br, a1, sum[r][1]);
                    }
                }
            }
#pragma GCC unroll 6
            for (int r = 0; r < 6; ++r) {
                float* row = acc + (r0 + r) * ldacc + c0;
                _mm256_storeu_ps(row, _mm256_add_ps(_mm256_loadu_ps(row), sum[r][0]));
                _mm256_storeu_ps(row + 8, _mm256_add_ps(_mm256_loadu_ps(row + 8), sum[r][1]));
            }
        }
    }
}

// The first n of 8 lanes.
inline __m256i lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// 8 channels by 8 positions a step: 8 row loads, a register transpose, 8 row stores.
void gather(const float* gy, int64_t co, int64_t positions, const int64_t* image,
            const int64_t* p0, const int64_t* nvalid, int64_t npanels, float* at,
            int64_t ldblock) {
    const int64_t padded = (co + kWgradNr - 1) / kWgradNr * kWgradNr;
    int64_t s = 0;
    for (int64_t i = 0; i < npanels; ++i) {
        const float* src = gy + image[i] * co * positions + p0[i];
        for (int64_t l = 0; l < nvalid[i]; l += 8) {
            const int64_t n = nvalid[i] - l < 8 ? nvalid[i] - l : 8;
            const __m256i m = lanes(n);
            for (int64_t c = 0; c < padded; c += 8) {
                __m256 r[8];
                for (int64_t j = 0; j < 8; ++j)
                    r[j] = c + j < co ? _mm256_maskload_ps(src + (c + j) * positions + l, m)
                                      : _mm256_setzero_ps();
                transpose8(r);
                float* dst = at + c / kWgradNr * ldblock + s * kWgradNr + c % kWgradNr;
                for (int64_t j = 0; j < n; ++j) _mm256_storeu_ps(dst + j * kWgradNr, r[j]);
            }
            s += n;
        }
    }
}

// The pointwise dot-product tile in two passes of kPwMo rows o by 3 rows c (12 ymm
// accumulators, 3 + 1 operand registers); partial sums in lanes 0-7 of each pair's 16.
void pointwise(const float* const* g, const float* const* x, int64_t len, bool first,
               float* acc) {
    static_assert(kPwMo == 4 && kPwMc == 6 && kPwLanes == 16, "two passes of 4 x 3 pairs");
    if (first)  // lanes 8-15 stay zeros
        for (int64_t i = 0; i < kPwMo * kPwMc; ++i)
            _mm256_storeu_ps(acc + i * 16 + 8, _mm256_setzero_ps());
    for (int j0 = 0; j0 < kPwMc; j0 += 3) {
        __m256 sum[kPwMo][3];
#pragma GCC unroll 4
        for (int i = 0; i < kPwMo; ++i)
#pragma GCC unroll 3
            for (int j = 0; j < 3; ++j)
                sum[i][j] = first ? _mm256_setzero_ps()
                                  : _mm256_loadu_ps(acc + (i * kPwMc + j0 + j) * 16);
        // full: unmasked loads; else the tail's masked loads, zeros past len
        const auto step = [&](int64_t p, bool full, __m256i m) __attribute__((always_inline)) {
            const auto load = [&](const float* q) __attribute__((always_inline)) {
                return full ? _mm256_loadu_ps(q) : _mm256_maskload_ps(q, m);
            };
            __m256 xv[3];
#pragma GCC unroll 3
            for (int j = 0; j < 3; ++j) xv[j] = load(x[j0 + j] + p);
#pragma GCC unroll 4
            for (int i = 0; i < kPwMo; ++i) {
                const __m256 gv = load(g[i] + p);
#pragma GCC unroll 3
                for (int j = 0; j < 3; ++j) sum[i][j] = _mm256_fmadd_ps(gv, xv[j], sum[i][j]);
            }
        };
        int64_t p = 0;
        for (; p + 8 <= len; p += 8) step(p, true, lanes(8));
        if (p < len) step(p, false, lanes(len - p));
#pragma GCC unroll 4
        for (int i = 0; i < kPwMo; ++i)
#pragma GCC unroll 3
            for (int j = 0; j < 3; ++j)
                _mm256_storeu_ps(acc + (i * kPwMc + j0 + j) * 16, sum[i][j]);
    }
}

}  // namespace

WgradPointwiseKernel conv_wgrad_pointwise_avx2() { return pointwise; }
WgradKernel conv_wgrad_kernel_avx2() { return kernel; }
WgradGather conv_wgrad_gather_avx2() { return gather; }

}  // namespace tianyuan
