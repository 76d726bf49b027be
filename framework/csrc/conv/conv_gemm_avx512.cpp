// AVX-512 register block for the direct GEMM convolution (conv_gemm.h): kMr rows of output
// channels by 32 positions held in 2 * kMr zmm accumulators; per reduction row, two vector
// loads of positions and one broadcast of a packed weight per row. Tails use masked
// loads and stores (masked-off lanes never fault).
#include <immintrin.h>

#include <cstdint>

#include "conv/conv_gemm.h"
#include "conv/conv_gemm_pack_impl.h"
#include "runtime/fma_peak_impl.h"
#include "conv/transpose_avx512.h"

namespace tianyuan {
namespace {

inline __mmask16 lanes(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Lanes [lo, hi) of a 32-lane panel row as two 16-lane masks.
inline void lane_masks(int64_t lo, int64_t hi, __mmask16* m0, __mmask16* m1) {
    const uint32_t bits = hi <= lo ? 0u : (uint32_t(hi >= 32 ? ~0ull : (1ull << hi) - 1) &
                                          ~uint32_t((1ull << lo) - 1));
    *m0 = __mmask16(bits & 0xFFFF);
    *m1 = __mmask16(bits >> 16);
}

template <int MR, bool MASKED>
void block(const float* a, const float* b, int64_t ldb, int64_t kc, const ConvGemmOut& out,
           int64_t row0, bool first, bool last, const float* scale, const float* shift,
           int act) {
    __mmask16 m0[kConvGemmNr], m1[kConvGemmNr];  // the lanes of each output run
    for (int64_t i = 0; i < out.count; ++i) lane_masks(out.lo[i], out.hi[i], &m0[i], &m1[i]);
    const int64_t nvalid = out.hi[out.count - 1], ldc = out.ldc;
    const __mmask16 b0m = lanes(nvalid), b1m = lanes(nvalid - 16);
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t i = 0; !first && i < out.count; ++i) {
        const float* at = out.base[i] + row0 * ldc;
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            acc[r][0] = _mm512_mask_loadu_ps(acc[r][0], m0[i], at + r * ldc);
            acc[r][1] = _mm512_mask_loadu_ps(acc[r][1], m1[i], at + r * ldc + 16);
        }
    }
    for (int64_t k = 0; k < kc; ++k) {
        // full rows load unmasked (bench/RESULTS.md, fp32 kernels)
        const __m512 b0 = MASKED ? _mm512_maskz_loadu_ps(b0m, b + k * ldb)
                                 : _mm512_loadu_ps(b + k * ldb);
        const __m512 b1 = MASKED ? _mm512_maskz_loadu_ps(b1m, b + k * ldb + 16)
                                 : _mm512_loadu_ps(b + k * ldb + 16);
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            const __m512 ar = _mm512_set1_ps(a[k * kConvGemmMr + r]);
            acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
#pragma GCC unroll 12
    for (int r = 0; r < MR && last; ++r) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            __m512 v = acc[r][h];  // one rounding for scale and shift, as in conv_gemm_few
            if (scale && shift)
                v = _mm512_fmadd_ps(v, _mm512_set1_ps(scale[r]), _mm512_set1_ps(shift[r]));
            else if (scale)
                v = _mm512_mul_ps(v, _mm512_set1_ps(scale[r]));
            else if (shift)
                v = _mm512_add_ps(v, _mm512_set1_ps(shift[r]));
            if (act >= 1) v = _mm512_max_ps(v, zero);
            if (act == 2) v = _mm512_min_ps(v, six);
            acc[r][h] = v;
        }
    }
    for (int64_t i = 0; i < out.count; ++i) {
        float* at = out.base[i] + row0 * ldc;
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            _mm512_mask_storeu_ps(at + r * ldc, m0[i], acc[r][0]);
            _mm512_mask_storeu_ps(at + r * ldc + 16, m1[i], acc[r][1]);
        }
    }
}

using Block = void (*)(const float*, const float*, int64_t, int64_t, const ConvGemmOut&,
                       int64_t, bool, bool, const float*, const float*, int);
static_assert(kConvGemmMr == 12, "one block<> per row count");
constexpr Block kBlocks[2][kConvGemmMr] = {
    {block<1, false>, block<2, false>, block<3, false>, block<4, false>, block<5, false>,
     block<6, false>, block<7, false>, block<8, false>, block<9, false>, block<10, false>,
     block<11, false>, block<12, false>},
    {block<1, true>, block<2, true>, block<3, true>, block<4, true>, block<5, true>,
     block<6, true>, block<7, true>, block<8, true>, block<9, true>, block<10, true>,
     block<11, true>, block<12, true>}};

void kernel(const float* a, const float* b, int64_t ldb, int64_t kc, const ConvGemmOut& out,
            int64_t row0, int64_t mr, bool first, bool last, const float* scale,
            const float* shift, int act) {
    // a packed panel's lanes past nvalid are zero, so only a pointwise input read in place
    // needs the masks (its last panel of an image)
    const bool masked = ldb != kConvGemmNr && out.hi[out.count - 1] < kConvGemmNr;
    kBlocks[masked][mr - 1](a, b, ldb, kc, out, row0, first, last, scale, shift, act);
}

// A planned segment's lanes 0-15 and 16-31 as the masks of the panel row's two vectors.
inline __mmask16 low_lanes(const TapReads& t, int64_t s) { return __mmask16(t.lanes[s]); }
inline __mmask16 high_lanes(const TapReads& t, int64_t s) {
    return __mmask16(t.lanes[s] >> 16);
}

// Stride 2: each 16 lanes are the even columns of 32 consecutive ones, two masked loads and
// a permute, not a gather of 16 (bench/RESULTS.md, fp32 kernels).
inline void pack_row_stride2(const float* plane, const TapReads& t, __m512* lo, __m512* hi) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    for (int64_t s = 0; s < t.count; ++s) {
        const float* at = plane + t.offset[s];
        const uint64_t span = t.span[s];
        const __mmask16 m0 = low_lanes(t, s), m1 = high_lanes(t, s);
        if (m0) {
            const __m512 a = _mm512_maskz_loadu_ps(__mmask16(span), at);
            const __m512 b = _mm512_maskz_loadu_ps(__mmask16(span >> 16), at + 16);
            *lo = _mm512_mask_mov_ps(*lo, m0, _mm512_permutex2var_ps(a, even, b));
        }
        if (m1) {
            const __m512 a = _mm512_maskz_loadu_ps(__mmask16(span >> 32), at + 32);
            const __m512 b = _mm512_maskz_loadu_ps(__mmask16(span >> 48), at + 48);
            *hi = _mm512_mask_mov_ps(*hi, m1, _mm512_permutex2var_ps(a, even, b));
        }
    }
}

// One panel row from one channel's plane: a masked load per segment (stride 1; masked-off
// lanes never fault, so lane 0's address may lie outside the plane), loads and permutes
// (stride 2) or a masked gather.
inline void pack_row(const float* plane, const TapReads& t, int64_t sw, float* dst) {
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
    if (sw == 1) {
        for (int64_t s = 0; s < t.count; ++s) {
            lo = _mm512_mask_loadu_ps(lo, low_lanes(t, s), plane + t.offset[s]);
            hi = _mm512_mask_loadu_ps(hi, high_lanes(t, s), plane + t.offset[s] + 16);
        }
    } else if (sw == 2) {
        pack_row_stride2(plane, t, &lo, &hi);
    } else {
        const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                               15);
        const __m512i idx0 = _mm512_mullo_epi32(iota, _mm512_set1_epi32(int(sw)));
        const __m512i idx1 = _mm512_add_epi32(idx0, _mm512_set1_epi32(int(16 * sw)));
        for (int64_t s = 0; s < t.count; ++s) {
            const float* at = plane + t.offset[s];
            const __mmask16 m0 = low_lanes(t, s), m1 = high_lanes(t, s);
            if (m0) lo = _mm512_mask_i32gather_ps(lo, m0, idx0, at, 4);
            if (m1) hi = _mm512_mask_i32gather_ps(hi, m1, idx1, at, 4);
        }
    }
    _mm512_store_ps(dst, lo);
    _mm512_store_ps(dst + 16, hi);
}

void pack(const float* xn, const Conv2dGeometry& g, const ConvGemmSegment* seg, int64_t nseg,
          int64_t /*nvalid: lanes outside every segment stay zero*/, int64_t k0, int64_t kc,
          float* panel) {
    pack_panel<pack_row>(xn, g, seg, nseg, k0, kc, panel);
}

// dst[k][r] = w[cb * 12 + r][k]: 16 columns a step, the 12 rows transposed in
// registers (the scalar loop ran at a third of memory speed).
void pack_weights(const float* w, int64_t co, int64_t depth, int64_t cb, float* dst) {
    const int64_t r0 = cb * kConvGemmMr, rows = co - r0 < kConvGemmMr ? co - r0 : kConvGemmMr;
    const __mmask16 row_lanes = lanes(kConvGemmMr);
    for (int64_t k0 = 0; k0 < depth; k0 += 16) {
        const int64_t n = depth - k0 < 16 ? depth - k0 : 16;
        __m512 r[16];
        for (int i = 0; i < 16; ++i)
            r[i] = i < rows ? _mm512_maskz_loadu_ps(lanes(n), w + (r0 + i) * depth + k0)
                            : _mm512_setzero_ps();
        transpose16(r);
        for (int64_t j = 0; j < n; ++j)
            _mm512_mask_storeu_ps(dst + (k0 + j) * kConvGemmMr, row_lanes, r[j]);
    }
}

}  // namespace

ConvGemmPackWeights conv_gemm_pack_weights_avx512() { return pack_weights; }
ConvGemmKernel conv_gemm_kernel_avx512() { return kernel; }
ConvGemmPack conv_gemm_pack_avx512() { return pack; }

int64_t fma_peak_steps_avx512(int64_t steps) {
    return fma_chains(steps, _mm512_set1_ps(static_cast<float>(steps & 7)), _mm512_set1_ps(1.0f),
                      _mm512_set1_ps(0.0f));
}

}  // namespace tianyuan
