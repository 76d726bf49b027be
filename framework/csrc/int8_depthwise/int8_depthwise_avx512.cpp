// AVX-512 depthwise int8 convolution of one channel plane, 16 output columns a step:
// acc (s32 x16) += x_u8 * w over the kh*kw taps (products fit int16 but sums do not, so
// lanes are s32), then the channel's requantization, exactly reference.requantize, and a
// 16-byte store into the NCHW row. The input plane is pre-padded with the zero point
// (and sign-flipped for s8), so the window needs no bounds checks; the zero-point term
// z * sum(w) is folded into the bias by the caller. Column stride 1 or 2.
#include <immintrin.h>

#include <cstdint>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"
#include "int8_gemm/int8_requant_avx512.h"

namespace tianyuan {
namespace int8 {
namespace {

inline __mmask16 lanes(int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// 16 s32 accumulators -> 16 requantized bytes (masked to n lanes).
inline void store16(__m512i acc, const ChannelQ& c, uint8_t* out, int64_t n) {
    _mm_mask_storeu_epi8(out, lanes(n), _mm512_cvtepi32_epi8(requant16(acc, c)));
}

// 16 inputs at p, p + S, ... as s32 lanes (S = 1: 16 bytes; S = 2: even bytes of 32).
template <int S>
inline __m512i load16(const uint8_t* p) {
    if (S == 1) return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i words = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_and_si512(words, _mm512_set1_epi32(0xFF));
}

// The kernel taps as broadcast s32 vectors, kept in registers by the fixed-size windows.
struct Taps {
    __m512i v[25];
};

inline Taps broadcast_taps(const int8_t* w, int64_t n) {
    Taps t;
    for (int64_t i = 0; i < n && i < 25; ++i) t.v[i] = _mm512_set1_epi32(w[i]);
    return t;
}

// Sum over the window of 16 outputs whose top-left taps are p, p + S, ...; KH = KW = 0:
// sizes from g (taps then read from w, any size).
template <int KH, int KW, int S>
inline __m512i window16(const uint8_t* p, int64_t wp, const int8_t* w, const Taps& t,
                        const ConvGeom& g) {
    __m512i acc = _mm512_setzero_si512();
    if (KH == 0) {
        for (int64_t i = 0; i < g.kh; ++i) {
            for (int64_t j = 0; j < g.kw; ++j) {
                const __m512i x = load16<S>(p + i * g.dh * wp + j * g.dw);
                acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(x, _mm512_set1_epi32(w[i * g.kw + j])));
            }
        }
        return acc;
    }
    const int64_t dy = g.dh * wp, dx = g.dw;
#pragma GCC unroll 25
    for (int i = 0; i < KH * KW; ++i) {
        const __m512i x = load16<S>(p + (i / KW) * dy + (i % KW) * dx);
        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(x, t.v[i]));
    }
    return acc;
}

// Column stride S: row by row, 16 outputs a step.
template <int KH, int KW, int S>
void rows(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g, const ChannelQ& c,
          uint8_t* out) {
    const Taps t = broadcast_taps(w, KH * KW);
    const int64_t oh = g.oh, ow = g.ow, sh = g.sh;
    for (int64_t oy = 0; oy < oh; ++oy) {
        const uint8_t* top = xp + oy * sh * wp;
        for (int64_t x0 = 0; x0 < ow; x0 += 16) {
            store16(window16<KH, KW, S>(top + S * x0, wp, w, t, g), c, out + oy * ow + x0,
                    ow - x0);
        }
    }
}

// Rows oy < oh of a flat output (row pitch wp) into out (oh, ow).
void copy_flat_rows(const uint8_t* flat, int64_t wp, int64_t oh, int64_t ow, uint8_t* out) {
    for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t x0 = 0; x0 < ow; x0 += 64) {
            const __mmask64 k = ow - x0 >= 64 ? ~0ull : (1ull << (ow - x0)) - 1;
            _mm512_mask_storeu_epi8(out + oy * ow + x0, k,
                                    _mm512_maskz_loadu_epi8(k, flat + oy * wp + x0));
        }
    }
}

// Stride 1: the padded plane read as one flat row, so 16-lane steps run across row ends
// (small planes fill the lanes); output f = oy * wp + ox, columns ox >= ow are dropped
// when the rows are copied out of `flat` (oh * wp + 16 bytes).
template <int KH, int KW>
void flat_s1(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
             const ChannelQ& c, uint8_t* out, uint8_t* flat) {
    const Taps t = broadcast_taps(w, KH * KW);
    const int64_t nf = (g.oh - 1) * wp + g.ow;
    for (int64_t f = 0; f < nf; f += 16) {
        store16(window16<KH, KW, 1>(xp + f, wp, w, t, g), c, flat + f, nf - f);
    }
    copy_flat_rows(flat, wp, g.oh, g.ow, out);
}

}  // namespace

void depthwise_plane_avx512(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
                            const RowParams& q, const Requant& r, uint8_t* out,
                            uint8_t* scratch) {
    const ChannelQ c = channel_q(q, r);
    const int64_t k = g.kh == g.kw && (g.kh == 3 || g.kh == 5) ? g.kh : 0;
    if (g.sw == 1 && g.sh == 1) {
        if (k == 3) return flat_s1<3, 3>(xp, wp, w, g, c, out, scratch);
        if (k == 5) return flat_s1<5, 5>(xp, wp, w, g, c, out, scratch);
        return flat_s1<0, 0>(xp, wp, w, g, c, out, scratch);
    }
    if (g.sw == 1) return rows<0, 0, 1>(xp, wp, w, g, c, out);
    if (k == 3) return rows<3, 3, 2>(xp, wp, w, g, c, out);
    if (k == 5) return rows<5, 5, 2>(xp, wp, w, g, c, out);
    rows<0, 0, 2>(xp, wp, w, g, c, out);
}

}  // namespace int8
}  // namespace tianyuan
