// AVX-512 requantization, 16 columns a step, lane for lane the reference formula:
// t = acc + bias (s32); p = t * m as s64 (vpmuldq on even and odd lanes separately);
// y = (p + 2^(s-1)) >>arith s; clamp in s64 to [lo - zp, hi - zp]; + zp; narrow to bytes.
// Tails use masked loads/stores, so every column goes through the same instructions.
#include <immintrin.h>

#include <cstdint>

#include "int8_gemm/int8_gemm.h"

namespace tianyuan {
namespace int8 {
namespace {

// Rounded arithmetic shift of the s64 products p by per-lane s (s in the low 32 bits).
inline __m512i round_shift(__m512i p, __m512i s) {
    const __m512i one = _mm512_set1_epi64(1);
    const __m512i half = _mm512_sllv_epi64(one, _mm512_sub_epi64(s, one));
    return _mm512_srav_epi64(_mm512_add_epi64(p, half), s);
}

inline __m512i scale16(__m512i t, __m512i m, __m512i s, __m512i lo, __m512i hi) {
    const __m512i low32 = _mm512_set1_epi64(0xFFFFFFFFll);
    const __m512i pe = _mm512_mul_epi32(t, m);  // lanes 0, 2, 4, ...
    const __m512i po = _mm512_mul_epi32(_mm512_srli_epi64(t, 32), _mm512_srli_epi64(m, 32));
    __m512i ye = round_shift(pe, _mm512_and_si512(s, low32));
    __m512i yo = round_shift(po, _mm512_srli_epi64(s, 32));
    ye = _mm512_min_epi64(_mm512_max_epi64(ye, lo), hi);
    yo = _mm512_min_epi64(_mm512_max_epi64(yo, lo), hi);
    return _mm512_or_si512(_mm512_and_si512(ye, low32), _mm512_slli_epi64(yo, 32));
}

}  // namespace

void requant_row_avx512(const int32_t* acc, int64_t n, const Requant& r, uint8_t* out) {
    const __m512i lo = _mm512_set1_epi64(r.lo - r.zero_point);
    const __m512i hi = _mm512_set1_epi64(r.hi - r.zero_point);
    const __m512i zp = _mm512_set1_epi32(r.zero_point);
    __m512i bias = _mm512_set1_epi32(r.bias[0]);
    __m512i mult = _mm512_set1_epi32(r.multiplier[0]);
    __m512i shift = _mm512_set1_epi32(r.shift[0]);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = n - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - j)) - 1);
        if (r.step) {
            bias = _mm512_maskz_loadu_epi32(k, r.bias + j);
            mult = _mm512_maskz_loadu_epi32(k, r.multiplier + j);
            shift = _mm512_mask_loadu_epi32(_mm512_set1_epi32(1), k, r.shift + j);
        }
        const __m512i t = _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, acc + j), bias);
        const __m512i y = _mm512_add_epi32(scale16(t, mult, shift, lo, hi), zp);
        _mm_mask_storeu_epi8(out + j, k, _mm512_cvtepi32_epi8(y));
    }
}

}  // namespace int8
}  // namespace tianyuan
