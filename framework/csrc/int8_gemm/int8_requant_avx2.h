// One channel's requantization on 8 s32 lanes with AVX2, exactly reference.requantize:
// t = acc + bias (s32, wrapping); p = t * m as s64 (vpmuldq on even and odd lanes);
// y = (p + 2^(s-1)) >>arith s; clamp to [lo - zp, hi - zp]; + zp, the output byte's value in
// each s32 lane. For s >= 32 the high halves of the products fit s32 and the rest runs on 8
// s32 lanes (floor of a floor is the floor); for s >= 33 (the usual case) the rounding half
// is a multiple of 2^32 too and goes onto the high halves as 2^(s-33) (|p| < 2^62, so they
// stay below 2^31): one s32 add in place of two s64 ones. AVX2 has no 64-bit arithmetic
// shift, min or max, so s < 32 shifts as sign ^ ((x ^ sign) >>> s) and clamps with compares
// and blends.
// Where the output bytes are packed with saturating packs (pack16), requant8_sat spends fewer
// operations for s >= 33: the zero point joins the rounding half on the high halves,
// floor((h + 2^(s-33) + zp * 2^(s-32)) / 2^(s-32)) = y + zp exactly, the bounds are then in
// output units, and where they are the output type's own range the packs' saturation is the
// clamp: 8 vector operations for 8 outputs where requant8 takes 11.
// Included only by AVX2 translation units; everything is `static` (no COMDAT the linker
// could pick for a unit built with other flags).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_gemm/int8_gemm.h"

namespace tianyuan {
namespace int8 {

// One channel's constants, broadcast.
struct Chan {
    __m256i bias, mult, half, lo, hi, zp;  // lo, hi: s32 when wide, else s64
    __m256i half_hi;                       // s >= 33: 2^(s-33) (s32), the half on the highs
    __m256i add_hi, lo_out, hi_out;        // requant8_sat: 2^(s-33) + zp * 2^(s-32); r.lo, r.hi
    __m128i shift;                         // s - 32 when wide, else s
    bool wide, fold;                       // s >= 32, s >= 33
    bool sat;   // requant8_sat's form applies (sat_add)
    bool full;  // [r.lo, r.hi] is the output type's range: the saturating packs clamp
};

// requant8_sat's constant for shift s and zero point zp: whether its form applies (s >= 33
// and 2^(s-33) + zp * 2^(s-32) within 2^30: the highs of |t * m| <= 2^62 are within 2^30, so
// their sum fits s32), and the constant in *add.
static inline bool sat_add(int32_t s, int32_t zp, int32_t* add) {
    if (s < 33) return false;
    const int64_t step = int64_t{1} << (s - 32);  // s <= 62 (Requant): <= 2^30
    const int64_t a = step / 2 + int64_t{zp} * step;
    if (a <= -(int64_t{1} << 30) || a >= (int64_t{1} << 30)) return false;
    *add = static_cast<int32_t>(a);
    return true;
}

// Whether [r.lo, r.hi] is the output type's own range (the saturating packs clamp to it).
static inline bool full_range(const Requant& r) {
    return r.out_signed ? r.lo == -128 && r.hi == 127 : r.lo == 0 && r.hi == 255;
}

static inline Chan chan(int32_t bias, int32_t mult, int32_t s, const Requant& r) {
    const bool wide = s >= 32;
    const int32_t lo = r.lo - r.zero_point, hi = r.hi - r.zero_point;
    int32_t add_hi = 0;
    const bool sat = sat_add(s, r.zero_point, &add_hi);
    return {_mm256_set1_epi32(bias),
            _mm256_set1_epi32(mult),
            _mm256_set1_epi64x(int64_t{1} << (s - 1)),
            wide ? _mm256_set1_epi32(lo) : _mm256_set1_epi64x(lo),
            wide ? _mm256_set1_epi32(hi) : _mm256_set1_epi64x(hi),
            _mm256_set1_epi32(r.zero_point),
            _mm256_set1_epi32(s >= 33 ? 1 << (s - 33) : 0),
            _mm256_set1_epi32(add_hi),
            _mm256_set1_epi32(r.lo),
            _mm256_set1_epi32(r.hi),
            _mm_cvtsi32_si128(wide ? s - 32 : s),
            wide,
            s >= 33,
            sat,
            full_range(r)};
}

// floor(x / 2^s) for s64 lanes (AVX2 has no 64-bit arithmetic shift).
static inline __m256i sra64(__m256i x, __m128i s) {
    const __m256i sign = _mm256_cmpgt_epi64(_mm256_setzero_si256(), x);
    return _mm256_xor_si256(_mm256_srl_epi64(_mm256_xor_si256(x, sign), s), sign);
}

static inline __m256i clamp64(__m256i y, __m256i lo, __m256i hi) {
    y = _mm256_blendv_epi8(y, lo, _mm256_cmpgt_epi64(lo, y));
    return _mm256_blendv_epi8(y, hi, _mm256_cmpgt_epi64(y, hi));
}

// (p + 2^(s-1)) >>arith s, clamped, + zp, for the s64 products of the even (pe) and odd (po)
// s32 lanes, the rounding half already added: 8 s32 lanes holding the output bytes' values.
static inline __m256i shift_clamp8(__m256i pe, __m256i po, const Chan& c) {
    if (c.wide) {  // the high halves fit s32: shift and clamp 8 s32 lanes
        const __m256i high = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
        const __m256i y = _mm256_sra_epi32(high, c.shift);
        return _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(y, c.lo), c.hi), c.zp);
    }
    const __m256i ye = clamp64(sra64(pe, c.shift), c.lo, c.hi);
    const __m256i yo = clamp64(sra64(po, c.shift), c.lo, c.hi);
    return _mm256_add_epi32(_mm256_blend_epi32(ye, _mm256_slli_epi64(yo, 32), 0xAA), c.zp);
}

// 8 accumulators of one channel -> 8 s32 lanes holding the output bytes' values.
static inline __m256i requant8(__m256i acc, const Chan& c) {
    const __m256i t = _mm256_add_epi32(acc, c.bias);
    if (c.fold) {
        const __m256i pe = _mm256_mul_epi32(t, c.mult);
        const __m256i po = _mm256_mul_epi32(_mm256_srli_epi64(t, 32), c.mult);
        const __m256i high = _mm256_add_epi32(
            _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA), c.half_hi);
        const __m256i y = _mm256_sra_epi32(high, c.shift);
        return _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(y, c.lo), c.hi), c.zp);
    }
    const __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(t, c.mult), c.half);
    const __m256i po =
        _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(t, 32), c.mult), c.half);
    return shift_clamp8(pe, po, c);
}

// 8 accumulators of one channel -> 8 s32 lanes whose saturating pack (pack16) is the output
// bytes: requant8's values, or where c.sat, those before a clamp that c.full leaves to the
// packs.
// requant8_sat_t takes t = acc + bias itself (accumulators that started at c.bias).
static inline __m256i requant8_sat_t(__m256i t, const Chan& c) {
    if (!c.sat) return requant8(_mm256_sub_epi32(t, c.bias), c);  // wraps back exactly
    const __m256i pe = _mm256_mul_epi32(t, c.mult);
    const __m256i po = _mm256_mul_epi32(_mm256_srli_epi64(t, 32), c.mult);
    const __m256i high = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
    const __m256i y = _mm256_sra_epi32(_mm256_add_epi32(high, c.add_hi), c.shift);
    return c.full ? y : _mm256_min_epi32(_mm256_max_epi32(y, c.lo_out), c.hi_out);
}

static inline __m256i requant8_sat(__m256i acc, const Chan& c) {
    return requant8_sat_t(_mm256_add_epi32(acc, c.bias), c);
}

// Two sets of 8 output values (elements 0-7, 8-15) -> 16 bytes in order, each value clamped
// to the output type's range by the saturating packs (requant8's are within it already).
static inline __m128i pack16(__m256i y0, __m256i y1, bool out_signed) {
    const __m256i w = _mm256_packs_epi32(y0, y1);  // per 128-bit lane: y0 4, y1 4
    const __m256i b = out_signed ? _mm256_packs_epi16(w, w) : _mm256_packus_epi16(w, w);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, order));
}

// The first n (<= 16) bytes of v at out: one store when all 16 fit, else through a buffer.
static inline void store_first(__m128i v, uint8_t* out, int64_t n) {
    if (n >= 16) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
        return;
    }
    alignas(16) uint8_t tmp[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), v);
    std::memcpy(out, tmp, static_cast<size_t>(n));
}

// The first n (<= 32) bytes of v at out, likewise.
static inline void store_first32(__m256i v, uint8_t* out, int64_t n) {
    if (n >= 32) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
        return;
    }
    alignas(32) uint8_t tmp[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), v);
    std::memcpy(out, tmp, static_cast<size_t>(n));
}

}  // namespace int8
}  // namespace tianyuan
