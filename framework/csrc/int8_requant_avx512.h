// One channel's requantization on 16 s32 lanes, exactly reference.requantize:
// t = acc + bias (s32, wrapping); p = t * m as s64 (vpmuldq on even and odd lanes);
// y = (p + 2^(s-1)) >>arith s; clamp in s64 to [lo - zp, hi - zp]; + zp. The result is the
// output byte in the low 8 bits of each s32 lane. Included only by AVX-512 translation
// units; everything is `static` so that each unit keeps its own copy (no COMDAT the linker
// could pick for a unit built with other flags).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "int8_cgemm.h"

namespace tianyuan {
namespace int8 {

// A channel's constants as vectors, set up once per plane.
struct ChannelQ {
    __m512i bias, mult, half, lo, hi, zp;
    __m128i shift;
};

static inline ChannelQ channel_q(const RowParams& q, const Requant& r) {
    const int32_t s = q.shift[0];
    return {_mm512_set1_epi32(q.bias[0]),
            _mm512_set1_epi32(q.multiplier[0]),
            _mm512_set1_epi64(int64_t{1} << (s - 1)),
            _mm512_set1_epi64(r.lo - r.zero_point),
            _mm512_set1_epi64(r.hi - r.zero_point),
            _mm512_set1_epi32(r.zero_point),
            _mm_cvtsi32_si128(s)};
}

static inline __m512i requant16(__m512i acc, const ChannelQ& c) {
    const __m512i t = _mm512_add_epi32(acc, c.bias);
    __m512i ye = _mm512_sra_epi64(_mm512_add_epi64(_mm512_mul_epi32(t, c.mult), c.half), c.shift);
    __m512i yo = _mm512_sra_epi64(
        _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(t, 32), c.mult), c.half), c.shift);
    ye = _mm512_min_epi64(_mm512_max_epi64(ye, c.lo), c.hi);
    yo = _mm512_min_epi64(_mm512_max_epi64(yo, c.lo), c.hi);
    // odd lanes' results into the high halves of the even lanes' qwords
    const __m512i y = _mm512_mask_mov_epi32(ye, 0xAAAA, _mm512_slli_epi64(yo, 32));
    return _mm512_add_epi32(y, c.zp);
}

}  // namespace int8
}  // namespace tianyuan
