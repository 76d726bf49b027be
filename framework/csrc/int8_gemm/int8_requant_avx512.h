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

#include "int8_cgemm/int8_cgemm.h"

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

// The high halves of the s64 lanes of pe and po, interleaved: lane 2i the high half of pe's
// qword i, lane 2i + 1 that of po's. One two-source permute (was a shift and a blend).
static inline __attribute__((always_inline)) __m512i high_halves(__m512i pe, __m512i po) {
    const __m512i idx = _mm512_set_epi32(31, 15, 29, 13, 27, 11, 25, 9, 23, 7, 21, 5, 19, 3,
                                         17, 1);
    return _mm512_permutex2var_epi32(pe, idx, po);
}

// requant16_y's fold form (every shift >= 33) with a channel per s32 lane: t the sums with the
// bias added; per lane, mult_odd the multiplier shifted down 32 (the odd lanes' in the even
// halves), half_hi 2^(s - 33) and shift_hi s - 32. The kernels with channels in the lanes
// (depthwise, the AMX items' store) use it.
static inline __attribute__((always_inline)) __m512i fold_lanes(__m512i t, __m512i mult,
                                                                __m512i mult_odd,
                                                                __m512i half_hi,
                                                                __m512i shift_hi) {
    const __m512i pe = _mm512_mul_epi32(t, mult);
    const __m512i po = _mm512_mul_epi32(_mm512_srli_epi64(t, 32), mult_odd);
    return _mm512_srav_epi32(_mm512_add_epi32(high_halves(pe, po), half_hi), shift_hi);
}

// requant16 before its clamp and zero point: y as s32 lanes. Where s >= 32 y fits s32 as it
// is; for s < 32 it is clamped to [lo - zp, hi - zp] on the s64 lanes first (it may not fit).
// Always inline: out of line (GCC 12 chose so for the tiles of int8_cgemm_vnni.cpp), each call
// spilled the caller's live accumulators, since every zmm register is caller-saved.
static inline __attribute__((always_inline)) __m512i requant16_y(__m512i acc,
                                                                 const ChannelQ& c) {
    const __m512i t = _mm512_add_epi32(acc, c.bias);
    if (c.fold) {
        const __m512i pe = _mm512_mul_epi32(t, c.mult);
        const __m512i po = _mm512_mul_epi32(_mm512_srli_epi64(t, 32), c.mult);
        const __m512i high = _mm512_add_epi32(high_halves(pe, po), c.half_hi);
        return _mm512_sra_epi32(high, c.shift);
    }
    const __m512i pe = _mm512_add_epi64(_mm512_mul_epi32(t, c.mult), c.half);
    const __m512i po = _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(t, 32), c.mult),
                                        c.half);
    if (c.wide) return _mm512_sra_epi32(high_halves(pe, po), c.shift);
    __m512i ye = _mm512_sra_epi64(pe, c.shift);
    __m512i yo = _mm512_sra_epi64(po, c.shift);
    ye = _mm512_min_epi64(_mm512_max_epi64(ye, c.lo), c.hi);
    yo = _mm512_min_epi64(_mm512_max_epi64(yo, c.lo), c.hi);
    // odd lanes' results into the high halves of the even lanes' qwords
    return _mm512_mask_mov_epi32(ye, 0xAAAA, _mm512_slli_epi64(yo, 32));
}

static inline __attribute__((always_inline)) __m512i requant16(__m512i acc,
                                                               const ChannelQ& c) {
    __m512i y = requant16_y(acc, c);
    if (c.wide) y = _mm512_min_epi32(_mm512_max_epi32(y, c.lo), c.hi);
    return _mm512_add_epi32(y, c.zp);
}

// Sixteen channels' requantization constants, one channel per s32 lane (requant16 with the
// parameters as vectors instead of broadcasts): the AMX accumulator tiles and the channels-last
// tile (int8_conv_nhwc_vnni.cpp) hold a position per row and a channel per lane, so the rows
// requantize as they are, without a transpose.
struct LaneQ {
    __m512i bias, mult, mult_odd, half_even, half_odd, shift_even, shift_odd, shift32;
    __m512i lo, hi;  // s64 lanes: the clamp of the narrow path (requant16_y's)
    __m512i half_hi;  // fold: 2^(s - 33), the rounding half on the high halves
    bool wide;        // every channel's shift >= 32: the high halves, shifted on s32 lanes
    bool fold;        // every shift >= 33: the half added to the high halves (requant16_y's)
};

static inline __attribute__((always_inline)) LaneQ
lane_q(const int32_t* bias, const int32_t* mult, const int32_t* shift, const Requant& r) {
    LaneQ c;
    c.bias = _mm512_loadu_si512(bias);
    c.mult = _mm512_loadu_si512(mult);
    c.mult_odd = _mm512_srli_epi64(c.mult, 32);
    const __m512i s = _mm512_loadu_si512(shift);
    c.shift_even = _mm512_and_si512(s, _mm512_set1_epi64(0xFFFFFFFF));
    c.shift_odd = _mm512_srli_epi64(s, 32);
    const __m512i one = _mm512_set1_epi64(1);
    c.half_even = _mm512_sllv_epi64(one, _mm512_sub_epi64(c.shift_even, one));
    c.half_odd = _mm512_sllv_epi64(one, _mm512_sub_epi64(c.shift_odd, one));
    c.wide = _mm512_cmplt_epi32_mask(s, _mm512_set1_epi32(32)) == 0;
    c.fold = _mm512_cmplt_epi32_mask(s, _mm512_set1_epi32(33)) == 0;
    c.shift32 = _mm512_sub_epi32(s, _mm512_set1_epi32(32));
    c.half_hi = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_sub_epi32(s, _mm512_set1_epi32(33)));
    const int32_t lo = r.lo - r.zero_point, hi = r.hi - r.zero_point;
    c.lo = _mm512_set1_epi64(lo);
    c.hi = _mm512_set1_epi64(hi);
    return c;
}

// requant16_y (above), lane j with channel j's constants.
static inline __attribute__((always_inline)) __m512i
requant_lanes_y(__m512i acc, const LaneQ& c) {
    const __m512i t = _mm512_add_epi32(acc, c.bias);
    // the fold form: one add fewer than the wide form's two 64-bit ones
    if (c.fold) return fold_lanes(t, c.mult, c.mult_odd, c.half_hi, c.shift32);
    const __m512i pe = _mm512_add_epi64(_mm512_mul_epi32(t, c.mult), c.half_even);
    const __m512i po = _mm512_add_epi64(
        _mm512_mul_epi32(_mm512_srli_epi64(t, 32), c.mult_odd), c.half_odd);
    if (c.wide) {
        return _mm512_srav_epi32(high_halves(pe, po), c.shift32);
    }
    __m512i ye = _mm512_srav_epi64(pe, c.shift_even);
    __m512i yo = _mm512_srav_epi64(po, c.shift_odd);
    ye = _mm512_min_epi64(_mm512_max_epi64(ye, c.lo), c.hi);
    yo = _mm512_min_epi64(_mm512_max_epi64(yo, c.lo), c.hi);
    return _mm512_mask_mov_epi32(ye, 0xAAAA, _mm512_slli_epi64(yo, 32));
}

// The layer's constants of requant_row64: the zero point as s16 lanes, lo and hi as bytes.
struct RowQ {
    __m512i zp16, lo8, hi8, order;
    bool out_signed;
};

static inline RowQ row_q(const Requant& r) {
    // dword 4L + j of the packed bytes holds y_j's lanes 4L .. 4L + 3; dword k = 4j + L of the
    // output row wants them: source 4 (k % 4) + k / 4 (arguments from dword 15 down)
    return {_mm512_set1_epi16(static_cast<int16_t>(r.zero_point)),
            _mm512_set1_epi8(static_cast<char>(r.lo)), _mm512_set1_epi8(static_cast<char>(r.hi)),
            _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0),
            r.out_signed};
}

// Four requant16_y results (64 consecutive outputs of one channel) -> their 64 output bytes,
// exactly requant16's: two saturating packs s32 -> s16, the zero point added with s16
// saturation, a saturating pack to 8 bits, then the clamp to [lo, hi] on the bytes. Where
// y + zp lies in [lo, hi] nothing saturates (|y| < 384); above hi (below lo) every step keeps
// it above hi (below lo) - the 16-bit and 8-bit bounds lie on or outside [lo, hi] - and the clamp
// gives hi (lo), as requant16's clamp does. One permute undoes the packs' 128-bit lanes.
static inline __attribute__((always_inline)) __m512i requant_row64(__m512i y0, __m512i y1,
                                                                   __m512i y2, __m512i y3,
                                                                   const RowQ& q) {
    const __m512i a = _mm512_adds_epi16(_mm512_packs_epi32(y0, y1), q.zp16);
    const __m512i b = _mm512_adds_epi16(_mm512_packs_epi32(y2, y3), q.zp16);
    __m512i v;
    if (q.out_signed) {
        v = _mm512_min_epi8(_mm512_max_epi8(_mm512_packs_epi16(a, b), q.lo8), q.hi8);
    } else {
        v = _mm512_min_epu8(_mm512_max_epu8(_mm512_packus_epi16(a, b), q.lo8), q.hi8);
    }
    return _mm512_permutexvar_epi32(q.order, v);
}

}  // namespace int8
}  // namespace tianyuan
