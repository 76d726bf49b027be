// AVX-512 depthwise int8 convolution of one channel plane, 16 output columns a step:
// acc (s32 x16) += x_u8 * w over the kh*kw taps (products fit int16 but sums do not, so
// lanes are s32), then the channel's requantization, exactly reference.requantize, and a
// 16-byte store into the NCHW row. The input plane is pre-padded with the zero point
// (and sign-flipped for s8), so the window needs no bounds checks; the zero-point term
// z * sum(w) is folded into the bias by the caller. Strides 1 and 2 only.
#include <immintrin.h>

#include <cstdint>

#include "int8_cgemm.h"
#include "int8_ops.h"

namespace tianyuan {
namespace int8 {
namespace {

inline __mmask16 lanes(int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// 16 s32 accumulators -> 16 requantized bytes (masked to n lanes).
inline void store16(__m512i acc, const RowParams& q, const Requant& r, uint8_t* out,
                    int64_t n) {
    const __m512i low32 = _mm512_set1_epi64(0xFFFFFFFFll);
    const __m512i t = _mm512_add_epi32(acc, _mm512_set1_epi32(q.bias[0]));
    const __m512i m = _mm512_set1_epi32(q.multiplier[0]);
    const int32_t s = q.shift[0];
    const __m512i half = _mm512_set1_epi64(int64_t{1} << (s - 1));
    const __m128i sc = _mm_cvtsi32_si128(s);
    const __m512i lo = _mm512_set1_epi64(r.lo - r.zero_point);
    const __m512i hi = _mm512_set1_epi64(r.hi - r.zero_point);
    __m512i ye = _mm512_sra_epi64(_mm512_add_epi64(_mm512_mul_epi32(t, m), half), sc);
    __m512i yo = _mm512_sra_epi64(
        _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(t, 32), m), half), sc);
    ye = _mm512_min_epi64(_mm512_max_epi64(ye, lo), hi);
    yo = _mm512_min_epi64(_mm512_max_epi64(yo, lo), hi);
    const __m512i y = _mm512_or_si512(_mm512_and_si512(ye, low32), _mm512_slli_epi64(yo, 32));
    const __m512i b = _mm512_add_epi32(y, _mm512_set1_epi32(r.zero_point));
    _mm_mask_storeu_epi8(out, lanes(n), _mm512_cvtepi32_epi8(b));
}

// 16 inputs at p, p + S, ... as s32 lanes (S = 1: 16 bytes; S = 2: even bytes of 32).
template <int S>
inline __m512i load16(const uint8_t* p) {
    if (S == 1) return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i words = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_and_si512(words, _mm512_set1_epi32(0xFF));
}

template <int S>
void plane(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
           const RowParams& q, const Requant& r, uint8_t* out) {
    const int64_t taps = g.kh * g.kw;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
        const uint8_t* top = xp + oy * g.sh * wp;
        for (int64_t x0 = 0; x0 < g.ow; x0 += 16) {
            __m512i acc = _mm512_setzero_si512();
            for (int64_t t = 0; t < taps; ++t) {
                const uint8_t* p = top + (t / g.kw) * g.dh * wp + (t % g.kw) * g.dw + x0 * S;
                acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(load16<S>(p),
                                                               _mm512_set1_epi32(w[t])));
            }
            store16(acc, q, r, out + oy * g.ow + x0, g.ow - x0);
        }
    }
}

}  // namespace

void depthwise_plane_avx512(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
                            const RowParams& q, const Requant& r, uint8_t* out) {
    if (g.sw == 1) {
        plane<1>(xp, wp, w, g, q, r, out);
    } else {
        plane<2>(xp, wp, w, g, q, r, out);
    }
}

}  // namespace int8
}  // namespace tianyuan
