// The AMX work item's requantizing store (int8_amx.h), in 16 pieces that the next item's tile loop
// interleaves with its products (amx_item_tiles): run after the loop, the store had left the tiles
// idle for a large part of an item (bench/RESULTS.md), and issued after the next item's loop as a
// whole it overlapped nothing (the loop's tile loads fill the load buffer and the reorder buffer
// ahead of it). Only int8_tiles_amx.cpp includes this; everything is static (int8_requant_avx512.h
// says why).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "int8_amx/int8_amx.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_requant_avx512.h"

namespace tianyuan {
namespace int8 {
namespace {

// The 16 x 16 byte transpose of a unit (16 channels x 16 positions): the rows (a position's
// 16 output bytes each) gathered 4 to a register g[k] (rows 4k .. 4k + 3); register j of the
// result takes channels 4j .. 4j + 3, byte 16i + p of it is row p's byte 4j + i, which lies in
// g[p / 4] at 16 (p % 4) + 4j + i. Two-source byte permutes pick rows 0-7 and 8-15, a blend
// joins them.
// constexpr: a constant, not code run at load (an ISA unit's initializer is AVX-512 code,
// which a CPU without it could not run at import).
struct alignas(64) TransposeIndex {
    uint8_t v[4][64] = {};
    constexpr TransposeIndex() {
        for (int j = 0; j < 4; ++j)
            for (int i = 0; i < 4; ++i)
                for (int p = 0; p < 16; ++p)
                    v[j][16 * i + p] = static_cast<uint8_t>(64 * (p / 4 % 2) + 16 * (p % 4) +
                                                            4 * j + i);
    }
};
static constexpr TransposeIndex transpose_index{};

// An item's store under way: piece i (< 16) requantizes accumulator rows 4k .. 4k + 3 (k = i
// % 4) of unit u = i / 4 (channels 16 (u / 2), positions 16 (u % 2)); a unit's last piece
// transposes it and stores its 16 channels' runs as the window says.
struct Drain {
    AmxPending p;
    RowQ rq;
    LaneQ c;      // the unit's channels' constants (made at pieces 0 and 8; channels-last: 0)
    LaneQ c2;     // channels-last: those of channels 16-31 (made at piece 0)
    __m512i g[4];
    explicit Drain(const AmxPending& pending)  // r null: no store (nothing is read)
        : p(pending), rq(pending.r ? row_q(*pending.r) : RowQ{}) {}
};

// The channels-last store's piece i: positions 2i and 2i + 1, each one row of acc (channels
// 0-15 | 16-31) requantized as it lies, the two positions' 32 bytes from one requant_row64.
static inline __attribute__((always_inline)) void drain_piece_nhwc(Drain& d, int piece) {
    const AmxPending& p = d.p;
    if (piece == 0) {
        d.c = lane_q(p.q.bias, p.q.multiplier, p.q.shift, *p.r);
        d.c2 = lane_q(p.q.bias + 16, p.q.multiplier + 16, p.q.shift + 16, *p.r);
    }
    const int32_t* a = p.acc + 2 * piece * kAmxOc;
    const __m512i v = requant_row64(requant_lanes_y(_mm512_load_si512(a), d.c),
                                    requant_lanes_y(_mm512_load_si512(a + 16), d.c2),
                                    requant_lanes_y(_mm512_load_si512(a + kAmxOc), d.c),
                                    requant_lanes_y(_mm512_load_si512(a + kAmxOc + 16), d.c2),
                                    d.rq);
    const int64_t o0 = p.offs[2 * piece], o1 = p.offs[2 * piece + 1];
    if (o0 >= 0) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.base + o0), _mm512_castsi512_si256(v));
    }
    if (o1 >= 0) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.base + o1),
                            _mm512_extracti64x4_epi64(v, 1));
    }
}

static inline __attribute__((always_inline)) void drain_piece(Drain& d, int piece) {
    if (d.p.offs) {
        drain_piece_nhwc(d, piece);
        return;
    }
    const int u = piece / 4, k = piece % 4, o0 = 16 * (u / 2), p0 = 16 * (u % 2);
    const AmxPending& p = d.p;
    if (piece % 8 == 0) d.c = lane_q(p.q.bias + o0, p.q.multiplier + o0, p.q.shift + o0, *p.r);
    const int32_t* a = p.acc + (p0 + 4 * k) * kAmxOc + o0;
    d.g[k] = requant_row64(requant_lanes_y(_mm512_load_si512(a), d.c),
                           requant_lanes_y(_mm512_load_si512(a + kAmxOc), d.c),
                           requant_lanes_y(_mm512_load_si512(a + 2 * kAmxOc), d.c),
                           requant_lanes_y(_mm512_load_si512(a + 3 * kAmxOc), d.c), d.rq);
    if (k < 3) return;
    const __mmask64 upper = 0xFF00FF00FF00FF00ull;  // bytes of rows 8-15
    const AmxWindow& w = p.win[u % 2];
    for (int j = 0; j < 4; ++j) {
        const __m512i idx = _mm512_load_si512(transpose_index.v[j]);
        const __m512i v = _mm512_mask_blend_epi8(
            upper, _mm512_permutex2var_epi8(d.g[0], idx, d.g[1]),
            _mm512_permutex2var_epi8(d.g[2], idx, d.g[3]));
        const __m128i lanes[4] = {_mm512_castsi512_si128(v), _mm512_extracti32x4_epi32(v, 1),
                                  _mm512_extracti32x4_epi32(v, 2),
                                  _mm512_extracti32x4_epi32(v, 3)};
        for (int i = 0; i < 4; ++i) {  // channel o0 + 4j + i's 16 positions
            uint8_t* row = p.base + (o0 + 4 * j + i) * p.ld;
            for (int s = 0; s < w.segs; ++s) {
                _mm_mask_storeu_epi8(row + w.off[s], w.mask[s], lanes[i]);
            }
        }
    }
}

// The packed blocks' store (amx_gemm_block): the pending chunk of an AmxGemmState, kAmxOc
// channel rows of kPos s32 (positions past npos undefined); piece i (< kRowPieces)
// requantizes rows 4i .. 4i + 3 (those of channels below end), each with its channel's
// broadcast constants, to one 64-byte vector stored per segment.
constexpr int kRowPieces = kAmxOc / 4;
struct RowDrain {
    const AmxGemmState* s;
    RowQ rq;
};

static inline RowDrain row_drain(const AmxGemmState& s) {
    return {&s, s.acc ? row_q(*s.r) : RowQ{}};
}

static inline __attribute__((always_inline)) void row_drain_piece(const RowDrain& d, int piece) {
    const AmxGemmState& s = *d.s;
    const int64_t first = s.j + 4 * piece, last = first + 4 < s.end ? first + 4 : s.end;
    for (int64_t ch = first; ch < last; ++ch) {
        const ChannelQ c = channel_q(s.q.bias[ch], s.q.multiplier[ch], s.q.shift[ch], *s.r);
        const int32_t* a = s.acc + (ch - s.j) * kPos;
        const __m512i y0 = requant16_y(_mm512_load_si512(a), c);
        const __m512i y1 = requant16_y(_mm512_load_si512(a + 16), c);
        __m512i y2 = _mm512_setzero_si512(), y3 = y2;
        if (s.npos > 32) {
            y2 = requant16_y(_mm512_load_si512(a + 32), c);
            y3 = requant16_y(_mm512_load_si512(a + 48), c);
        }
        const __m512i v = requant_row64(y0, y1, y2, y3, d.rq);
        uint8_t* row = s.out + ch * s.ld;
        for (int i = 0; i < s.nsegs; ++i) {
            _mm512_mask_storeu_epi8(row + s.segs[i].off, s.segs[i].mask, v);
        }
    }
}

}  // namespace
}  // namespace int8
}  // namespace tianyuan
