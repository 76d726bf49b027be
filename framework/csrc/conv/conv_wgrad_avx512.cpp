// AVX-512 kernels of the convolution weight gradient (conv_gemm.h): the register block
// (kWgradMr rows k by 32 channels in 2 * kWgradMr zmm accumulators; per position two
// vector loads of gy^T and one broadcast per row from the packed panel, as in the forward)
// and the gather of gy^T rows (16 x 16 blocks transposed in registers).
#include <immintrin.h>

#include <cstdint>

#include "conv/conv_gemm.h"
#include "conv/transpose_avx512.h"

namespace tianyuan {
namespace {

static_assert(kWgradNr == 32, "two vectors of channels per row");

void kernel(const float* b, int64_t ldp, const int64_t* nvalid, int64_t npanels,
            const float* at, float* acc, int64_t ldacc) {
    __m512 sum[kWgradMr][2];
#pragma GCC unroll 12
    for (int r = 0; r < kWgradMr; ++r) sum[r][0] = sum[r][1] = _mm512_setzero_ps();
    for (int64_t pn = 0; pn < npanels; ++pn) {
        const float* bp = b + pn * ldp;
        for (int64_t l = 0; l < nvalid[pn]; ++l, at += kWgradNr) {
            const __m512 a0 = _mm512_loadu_ps(at), a1 = _mm512_loadu_ps(at + 16);
#pragma GCC unroll 12
            for (int r = 0; r < kWgradMr; ++r) {
                const __m512 br = _mm512_set1_ps(bp[r * kConvGemmNr + l]);
                sum[r][0] = _mm512_fmadd_ps(br, a0, sum[r][0]);
                sum[r][1] = _mm512_fmadd_ps(br, a1, sum[r][1]);
            }
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < kWgradMr; ++r) {
        float* row = acc + r * ldacc;
        _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), sum[r][0]));
        _mm512_storeu_ps(row + 16, _mm512_add_ps(_mm512_loadu_ps(row + 16), sum[r][1]));
    }
}

inline __mmask16 lanes(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// 16 channels by 16 positions a step: 16 row loads, a register transpose, 16 half-row
// stores, not a gather per position and 16 channels (bench/RESULTS.md, training).
void gather(const float* gy, int64_t co, int64_t positions, const int64_t* image,
            const int64_t* p0, const int64_t* nvalid, int64_t npanels, float* at,
            int64_t ldblock) {
    const int64_t padded = (co + kWgradNr - 1) / kWgradNr * kWgradNr;
    int64_t s = 0;
    for (int64_t i = 0; i < npanels; ++i) {
        const float* src = gy + image[i] * co * positions + p0[i];
        for (int64_t l = 0; l < nvalid[i]; l += 16) {
            const __mmask16 m = lanes(nvalid[i] - l);
            const int64_t n = nvalid[i] - l < 16 ? nvalid[i] - l : 16;
            for (int64_t c = 0; c < padded; c += 16) {
                __m512 r[16];
                for (int64_t j = 0; j < 16; ++j)
                    r[j] = c + j < co ? _mm512_maskz_loadu_ps(m, src + (c + j) * positions + l)
                                      : _mm512_setzero_ps();
                transpose16(r);
                float* dst = at + c / kWgradNr * ldblock + s * kWgradNr + c % kWgradNr;
                for (int64_t j = 0; j < n; ++j) _mm512_storeu_ps(dst + j * kWgradNr, r[j]);
            }
            s += n;
        }
    }
}

// The pointwise dot-product tile: per 16 positions kPwMc loads of x, and per row o one load
// of gy and kPwMc fused multiply-adds (24 accumulators, 6 + 1 operand registers).
void pointwise(const float* const* g, const float* const* x, int64_t len, bool first,
               float* acc) {
    static_assert(kPwMo == 4 && kPwMc == 6 && kPwLanes == 16, "24 zmm accumulators");
    __m512 sum[kPwMo][kPwMc];
#pragma GCC unroll 4
    for (int i = 0; i < kPwMo; ++i)
#pragma GCC unroll 6
        for (int j = 0; j < kPwMc; ++j)
            sum[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (i * kPwMc + j) * 16);
    const auto step = [&](int64_t p, __mmask16 m) __attribute__((always_inline)) {
        __m512 xv[kPwMc];
#pragma GCC unroll 6
        for (int j = 0; j < kPwMc; ++j) xv[j] = _mm512_maskz_loadu_ps(m, x[j] + p);
#pragma GCC unroll 4
        for (int i = 0; i < kPwMo; ++i) {
            const __m512 gv = _mm512_maskz_loadu_ps(m, g[i] + p);
#pragma GCC unroll 6
            for (int j = 0; j < kPwMc; ++j) sum[i][j] = _mm512_fmadd_ps(gv, xv[j], sum[i][j]);
        }
    };
    int64_t p = 0;
    for (; p + 16 <= len; p += 16) step(p, __mmask16(0xFFFF));
    if (p < len) step(p, lanes(len - p));
#pragma GCC unroll 4
    for (int i = 0; i < kPwMo; ++i)
#pragma GCC unroll 6
        for (int j = 0; j < kPwMc; ++j) _mm512_storeu_ps(acc + (i * kPwMc + j) * 16, sum[i][j]);
}

}  // namespace

WgradPointwiseKernel conv_wgrad_pointwise_avx512() { return pointwise; }
WgradKernel conv_wgrad_kernel_avx512() { return kernel; }
WgradGather conv_wgrad_gather_avx512() { return gather; }

}  // namespace tianyuan
