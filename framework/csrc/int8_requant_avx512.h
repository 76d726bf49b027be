// One channel's requantization on 16 s32 lanes, exactly reference.requantize:
// t = acc + bias (s32, wrapping); p = t * m as s64 (vpmuldq on even and odd lanes);
// y = (p + 2^(s-1)) >>arith s; clamp to [lo - zp, hi - zp]; + zp. The result is the output
// byte in the low 8 bits of each s32 lane. For s >= 32 (scales below 1/2, the usual case)
// y = ((p + 2^(s-1)) >> 32) >> (s - 32): the high halves of the products, which fit s32, so
// the shift and the clamp run on 16 s32 lanes instead of twice 8 s64 (floor of a floor is
// the floor); for s >= 33 the rounding half is a multiple of 2^32 too and goes onto the high
// halves as 2^(s-33) (|p| < 2^62: they stay below 2^31), one s32 add for two s64 ones.
// Included only by AVX-512 translation units; everything is `static` so that each unit keeps
// its own copy (no COMDAT the linker could pick for a unit built with other flags).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "int8_cgemm.h"

namespace tianyuan {
namespace int8 {

// A channel's constants as vectors, set up once per channel.
struct ChannelQ {
    __m512i bias, mult, half, lo, hi, zp;  // lo, hi: s32 lanes when wide, else s64
    __m512i half_hi;                       // s >= 33: 2^(s-33) (s32), the half on the highs
    __m128i shift;                         // s - 32 when wide, else s
    bool wide, fold;                       // s >= 32, s >= 33
};

static inline ChannelQ channel_q(int32_t bias, int32_t mult, int32_t s, const Requant& r) {
    const bool wide = s >= 32;
    const int32_t lo = r.lo - r.zero_point, hi = r.hi - r.zero_point;
    return {_mm512_set1_epi32(bias),
            _mm512_set1_epi32(mult),
            _mm512_set1_epi64(int64_t{1} << (s - 1)),
            wide ? _mm512_set1_epi32(lo) : _mm512_set1_epi64(lo),
            wide ? _mm512_set1_epi32(hi) : _mm512_set1_epi64(hi),
            _mm512_set1_epi32(r.zero_point),
            _mm512_set1_epi32(s >= 33 ? 1 << (s - 33) : 0),
            _mm_cvtsi32_si128(wide ? s - 32 : s),
            wide,
            s >= 33};
}

static inline ChannelQ channel_q(const RowParams& q, const Requant& r) {
    return channel_q(q.bias[0], q.multiplier[0], q.shift[0], r);
}

// Always inline: out of line (GCC 12 chose so for the tiles of int8_cgemm_vnni.cpp), each call
// spilled the caller's live accumulators, since every zmm register is caller-saved.
static inline __attribute__((always_inline)) __m512i requant16(__m512i acc,
                                                               const ChannelQ& c) {
    const __m512i t = _mm512_add_epi32(acc, c.bias);
    if (c.fold) {
        const __m512i pe = _mm512_mul_epi32(t, c.mult);
        const __m512i po = _mm512_mul_epi32(_mm512_srli_epi64(t, 32), c.mult);
        const __m512i high = _mm512_add_epi32(
            _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po), c.half_hi);
        const __m512i y = _mm512_sra_epi32(high, c.shift);
        return _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(y, c.lo), c.hi), c.zp);
    }
    const __m512i pe = _mm512_add_epi64(_mm512_mul_epi32(t, c.mult), c.half);
    const __m512i po = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(t, 32), c.mult),
                                        c.half);
    if (c.wide) {
        // even lanes: the high half of pe; odd lanes: the high half of po (already in place)
        const __m512i high = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
        const __m512i y = _mm512_sra_epi32(high, c.shift);
        return _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(y, c.lo), c.hi), c.zp);
    }
    __m512i ye = _mm512_sra_epi64(pe, c.shift);
    __m512i yo = _mm512_sra_epi64(po, c.shift);
    ye = _mm512_min_epi64(_mm512_max_epi64(ye, c.lo), c.hi);
    yo = _mm512_min_epi64(_mm512_max_epi64(yo, c.lo), c.hi);
    // odd lanes' results into the high halves of the even lanes' qwords
    const __m512i y = _mm512_mask_mov_epi32(ye, 0xAAAA, _mm512_slli_epi64(yo, 32));
    return _mm512_add_epi32(y, c.zp);
}

}  // namespace int8
}  // namespace tianyuan
