// AVX2 requantization, 8 columns a step, lane for lane the reference formula. AVX2 has no
// 64-bit arithmetic shift or min/max: floor(x / 2^s) is computed as sign ^ ((x ^ sign) >>> s)
// and the clamp with vpcmpgtq + blend. Tail columns use the scalar twin requant_one.
#include <immintrin.h>

#include <cstdint>

#include "int8_gemm/int8_gemm.h"

namespace tianyuan {
namespace int8 {
namespace {

inline __m256i round_shift(__m256i p, __m256i s) {
    const __m256i one = _mm256_set1_epi64x(1);
    const __m256i x = _mm256_add_epi64(p, _mm256_sllv_epi64(one, _mm256_sub_epi64(s, one)));
    const __m256i sign = _mm256_cmpgt_epi64(_mm256_setzero_si256(), x);
    return _mm256_xor_si256(_mm256_srlv_epi64(_mm256_xor_si256(x, sign), s), sign);
}

inline __m256i clamp64(__m256i y, __m256i lo, __m256i hi) {
    y = _mm256_blendv_epi8(y, lo, _mm256_cmpgt_epi64(lo, y));
    return _mm256_blendv_epi8(y, hi, _mm256_cmpgt_epi64(y, hi));
}

inline __m256i scale8(__m256i t, __m256i m, __m256i s, __m256i lo, __m256i hi) {
    const __m256i low32 = _mm256_set1_epi64x(0xFFFFFFFFll);
    const __m256i pe = _mm256_mul_epi32(t, m);  // lanes 0, 2, 4, 6
    const __m256i po = _mm256_mul_epi32(_mm256_srli_epi64(t, 32), _mm256_srli_epi64(m, 32));
    const __m256i ye = clamp64(round_shift(pe, _mm256_and_si256(s, low32)), lo, hi);
    const __m256i yo = clamp64(round_shift(po, _mm256_srli_epi64(s, 32)), lo, hi);
    return _mm256_or_si256(_mm256_and_si256(ye, low32), _mm256_slli_epi64(yo, 32));
}

// Low byte of each of the 8 s32 lanes -> 8 bytes at out.
inline void store8(uint8_t* out, __m256i y) {
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                          -1, -1, -1, -1);
    const __m256i b = _mm256_shuffle_epi8(y, pick);
    const uint32_t lo = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_castsi256_si128(b)));
    const uint32_t hi = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm256_extracti128_si256(b, 1)));
    const uint64_t both = lo | (static_cast<uint64_t>(hi) << 32);
    __builtin_memcpy(out, &both, sizeof(both));
}

}  // namespace

void requant_row_avx2(const int32_t* acc, int64_t n, const Requant& r, uint8_t* out) {
    const __m256i lo = _mm256_set1_epi64x(r.lo - r.zero_point);
    const __m256i hi = _mm256_set1_epi64x(r.hi - r.zero_point);
    const __m256i zp = _mm256_set1_epi32(r.zero_point);
    __m256i bias = _mm256_set1_epi32(r.bias[0]);
    __m256i mult = _mm256_set1_epi32(r.multiplier[0]);
    __m256i shift = _mm256_set1_epi32(r.shift[0]);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        if (r.step) {
            bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.bias + j));
            mult = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.multiplier + j));
            shift = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.shift + j));
        }
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + j));
        const __m256i t = _mm256_add_epi32(a, bias);
        store8(out + j, _mm256_add_epi32(scale8(t, mult, shift, lo, hi), zp));
    }
    for (; j < n; ++j) {
        const int64_t q = j * r.step;
        out[j] = requant_one(acc[j], r.bias[q], r.multiplier[q], r.shift[q], r);
    }
}

}  // namespace int8
}  // namespace tianyuan
