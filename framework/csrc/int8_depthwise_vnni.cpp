// AVX512-VNNI depthwise int8 convolution of one channel plane (column dilation 1, kernel
// width <= 8, column stride 1 or 2; the layout of the padded plane is the AVX-512 kernel's).
// vpdpbusd multiplies 4 adjacent bytes of one kernel row by 4 taps and sums them into each
// s32 lane, so no input is widened: an unaligned 64-byte load at row + s holds in lane t the
// bytes row[s + 4t .. s + 4t + 3]. At column stride 1 these are the window row of output
// 4t + s, so the loads at s = 0..3 give 4 accumulators covering 64 outputs; at stride 2 the
// loads at s = 0, 2 cover outputs 2t and 2t + 1 (32 outputs). Kernels wider than 4 add a
// second tap word per row (taps 4..7, loads at + 4). After the channel's requantization
// the phases are interleaved back into consecutive bytes with masked byte moves.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm.h"
#include "int8_ops.h"
#include "int8_requant_avx512.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int kMaxTap = 8;  // kernel rows and columns this kernel takes

// Per kernel row i and tap word d (taps 4d .. 4d + 3 of the row, zeros past kw) one
// broadcast s32: the s8 operand of vpdpbusd.
struct TapWords {
    __m512i v[2 * kMaxTap];
};

TapWords tap_words(const int8_t* w, int64_t kh, int64_t kw, int nd) {
    TapWords t;
    for (int64_t i = 0; i < kh; ++i) {
        for (int d = 0; d < nd; ++d) {
            int8_t b[4] = {0, 0, 0, 0};
            for (int j = 0; j < 4 && 4 * d + j < kw; ++j) b[j] = w[i * kw + 4 * d + j];
            int32_t word;
            std::memcpy(&word, b, sizeof(word));
            t.v[i * nd + d] = _mm512_set1_epi32(word);
        }
    }
    return t;
}

inline __m512i load(const uint8_t* p) { return _mm512_loadu_si512(p); }

// The window sums of one step: S = 1: a[s] lane t = output 4t + s of the 64 outputs at
// p; S = 2: a[0], a[1] lane t = outputs 2t, 2t + 1 of the 32 at p (input offsets 2 apart).
// KH = 0: kh from the caller. dy = row step of the kernel (dh * wp).
template <int KH, int ND, int S>
inline void window(const uint8_t* p, int64_t dy, int64_t kh, const TapWords& t, __m512i* a) {
    const int64_t rows = KH ? KH : kh;
#pragma GCC unroll 8
    for (int64_t i = 0; i < rows; ++i) {
        const uint8_t* row = p + i * dy;
#pragma GCC unroll 2
        for (int d = 0; d < ND; ++d) {
            const __m512i wv = t.v[i * ND + d];
            const uint8_t* q = row + 4 * d;
            a[0] = _mm512_dpbusd_epi32(a[0], load(q), wv);
            a[1] = _mm512_dpbusd_epi32(a[1], load(q + S), wv);
            if (S == 1) {
                a[2] = _mm512_dpbusd_epi32(a[2], load(q + 2), wv);
                a[3] = _mm512_dpbusd_epi32(a[3], load(q + 3), wv);
            }
        }
    }
}

// Requantize the step's accumulators and store its n (<= 64 / S) outputs at out in order.
template <int S>
inline void store(const __m512i* a, const ChannelQ& c, uint8_t* out, int64_t n) {
    __m512i y = requant16(a[0], c);
    y = _mm512_mask_mov_epi8(y, 0x2222222222222222ull, _mm512_slli_epi32(requant16(a[1], c), 8));
    if (S == 1) {
        y = _mm512_mask_mov_epi8(y, 0x4444444444444444ull,
                                 _mm512_slli_epi32(requant16(a[2], c), 16));
        y = _mm512_mask_mov_epi8(y, 0x8888888888888888ull,
                                 _mm512_slli_epi32(requant16(a[3], c), 24));
        const __mmask64 k = n >= 64 ? ~0ull : (1ull << n) - 1;
        _mm512_mask_storeu_epi8(out, k, y);
        return;
    }
    // each s32 lane now holds outputs 2t, 2t + 1 in its low 16 bits
    const __mmask32 k = n >= 32 ? ~0u : (1u << n) - 1;
    _mm256_mask_storeu_epi8(out, k, _mm512_cvtepi32_epi16(y));
}

template <int KH, int ND, int S>
inline void step(const uint8_t* p, int64_t dy, int64_t kh, const TapWords& t,
                 const ChannelQ& c, uint8_t* out, int64_t n) {
    const __m512i z = _mm512_setzero_si512();
    __m512i a[4] = {z, z, z, z};
    window<KH, ND, S>(p, dy, kh, t, a);
    store<S>(a, c, out, n);
}

// Output row by row, 64 / S outputs a step, straight into out.
template <int KH, int ND, int S>
void rows(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t,
          const ChannelQ& c, uint8_t* out) {
    constexpr int64_t L = 64 / S;
    const int64_t dy = g.dh * wp;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
        const uint8_t* top = xp + oy * g.sh * wp;
        for (int64_t x0 = 0; x0 < g.ow; x0 += L) {
            step<KH, ND, S>(top + S * x0, dy, g.kh, t, c, out + oy * g.ow + x0, g.ow - x0);
        }
    }
}

// Row stride = column stride S: the plane as one flat run, output f = oy * wp + ox at input
// S * f, so steps run across row ends (small planes fill the lanes); the rows are then
// copied out of `flat`, dropping columns ox >= ow.
template <int KH, int ND, int S>
void flat(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t,
          const ChannelQ& c, uint8_t* out, uint8_t* scratch) {
    constexpr int64_t L = 64 / S;
    const int64_t nf = (g.oh - 1) * wp + g.ow, dy = g.dh * wp;
    for (int64_t f = 0; f < nf; f += L) {
        step<KH, ND, S>(xp + S * f, dy, g.kh, t, c, scratch + f, nf - f);
    }
    copy_flat_rows(scratch, wp, g.oh, g.ow, out);
}

template <int KH, int ND, int S>
void plane(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t,
           const ChannelQ& c, uint8_t* out, uint8_t* scratch) {
    constexpr int64_t L = 64 / S;
    const int64_t flat_steps = ((g.oh - 1) * wp + g.ow + L - 1) / L;
    const int64_t row_steps = g.oh * ((g.ow + L - 1) / L);
    if (g.sh == S && flat_steps <= row_steps) return flat<KH, ND, S>(xp, wp, g, t, c, out, scratch);
    rows<KH, ND, S>(xp, wp, g, t, c, out);
}

template <int S>
void plane_any(const uint8_t* xp, int64_t wp, const ConvGeom& g, const TapWords& t,
               const ChannelQ& c, uint8_t* out, uint8_t* scratch) {
    if (g.kh == 3 && g.kw == 3) return plane<3, 1, S>(xp, wp, g, t, c, out, scratch);
    if (g.kh == 5 && g.kw == 5) return plane<5, 2, S>(xp, wp, g, t, c, out, scratch);
    if (g.kw <= 4) return plane<0, 1, S>(xp, wp, g, t, c, out, scratch);
    plane<0, 2, S>(xp, wp, g, t, c, out, scratch);
}

}  // namespace

bool depthwise_vnni_takes(const ConvGeom& g) {
    return g.dw == 1 && (g.sw == 1 || g.sw == 2) && g.kh <= kMaxTap && g.kw <= kMaxTap;
}

void depthwise_plane_vnni(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
                          const RowParams& q, const Requant& r, uint8_t* out,
                          uint8_t* scratch) {
    const TapWords t = tap_words(w, g.kh, g.kw, g.kw <= 4 ? 1 : 2);
    const ChannelQ c = channel_q(q, r);
    if (g.sw == 1) return plane_any<1>(xp, wp, g, t, c, out, scratch);
    plane_any<2>(xp, wp, g, t, c, out, scratch);
}

}  // namespace int8
}  // namespace tianyuan
