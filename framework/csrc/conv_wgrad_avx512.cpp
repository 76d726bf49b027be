// AVX-512 kernels of the convolution weight gradient (conv_gemm.h): the register block
// (kWgradMr rows k by 32 channels in 2 * kWgradMr zmm accumulators; per position two
// vector loads of gy^T and one broadcast per row from the packed panel, as in the forward)
// and the gather of gy^T rows (16 channels, kept `positions` apart, per gather).
#include <immintrin.h>

#include <cstdint>

#include "conv_gemm.h"

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

void gather(const float* gy, int64_t co, int64_t positions, const int64_t* image,
            const int64_t* p0, const int64_t* nvalid, int64_t npanels, float* at,
            int64_t ldblock) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i step = _mm512_mullo_epi32(iota, _mm512_set1_epi32(int(positions)));
    const int64_t padded = (co + kWgradNr - 1) / kWgradNr * kWgradNr;
    int64_t s = 0;
    for (int64_t i = 0; i < npanels; ++i) {
        const float* src = gy + image[i] * co * positions + p0[i];
        for (int64_t l = 0; l < nvalid[i]; ++l, ++s)
            for (int64_t c = 0; c < padded; c += 16) {
                const int64_t left = co - c;
                const __mmask16 m = left >= 16  ? __mmask16(0xFFFF)
                                    : left <= 0 ? __mmask16(0)
                                                : __mmask16((1u << left) - 1);
                const __m512 v = m ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, step,
                                                               src + c * positions + l, 4)
                                   : _mm512_setzero_ps();
                _mm512_storeu_ps(at + c / kWgradNr * ldblock + s * kWgradNr + c % kWgradNr, v);
            }
    }
}

}  // namespace

WgradKernel conv_wgrad_kernel_avx512() { return kernel; }
WgradGather conv_wgrad_gather_avx512() { return gather; }

}  // namespace tianyuan
