// AVX2 depthwise int8 convolution of one channel plane, 16 output columns a step (the
// AVX-512 kernel's structure, int8_depthwise_avx512.cpp): the inputs of two taps, as int16,
// are interleaved so that one vpmaddwd against the taps' weight pair adds both products
// into s32 lanes (each product fits int16, their sum need not), then the channel's
// requantization, exactly reference.requantize, and a 16-byte store into the NCHW row. The
// input plane is pre-padded with the zero point (and sign-flipped for s8), so the window
// needs no bounds checks; the zero-point term z * sum(w) is folded into the bias by the
// caller. Column stride 1 or 2.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"
#include "int8_gemm/int8_requant_avx2.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int kMaxPairs = 13;  // fixed-size windows up to 5x5

// 16 inputs at p, p + S, ... as int16 lanes (S = 1: 16 bytes; S = 2: even bytes of 32).
template <int S>
inline __m256i load16(const uint8_t* p) {
    if (S == 1) return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                            _mm256_set1_epi16(0x00FF));
}

// Taps in pairs: pair i multiplies the inputs at offsets a[i] and b[i] by the int16 weights
// packed in w[i] (an odd tap count pairs the last tap with itself at weight 0).
struct Pairs {
    int64_t a[kMaxPairs], b[kMaxPairs];
    __m256i w[kMaxPairs];
    int64_t n;
};

// Pair i of the window (taps 2i, 2i + 1 in row-major order); `off` is tap t's offset.
inline void pair_of(const int8_t* w, int64_t taps, int64_t i, const int64_t* off,
                    int64_t* a, int64_t* b, __m256i* wv) {
    const int64_t t0 = 2 * i, t1 = 2 * i + 1 < taps ? 2 * i + 1 : 2 * i;
    const int16_t w0 = w[t0], w1 = 2 * i + 1 < taps ? w[t1] : 0;
    *a = off[t0];
    *b = off[t1];
    *wv = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint16_t>(w0) |
                                                 static_cast<uint32_t>(static_cast<uint16_t>(w1))
                                                     << 16));
}

// Sum over the window of 16 outputs whose top-left taps are p, p + S, ...: two s32
// accumulators, lo holding outputs 0-3 and 8-11, hi 4-7 and 12-15 (vpunpck works within
// 128-bit lanes). NP = 0: the pair count from ps (any window).
template <int NP, int S>
inline void window16(const uint8_t* p, const Pairs& ps, __m256i& lo, __m256i& hi) {
    lo = hi = _mm256_setzero_si256();
    const int64_t n = NP ? NP : ps.n;
#pragma GCC unroll 13
    for (int64_t i = 0; i < n; ++i) {
        const __m256i xa = load16<S>(p + ps.a[i]), xb = load16<S>(p + ps.b[i]);
        lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(xa, xb), ps.w[i]));
        hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(xa, xb), ps.w[i]));
    }
}

// lo/hi accumulators -> 16 requantized bytes at out (the first n kept).
inline void store16(__m256i lo, __m256i hi, const Chan& c, bool out_signed, uint8_t* out,
                    int64_t n) {
    // per 128-bit lane: lo's 4 outputs then hi's 4, i.e. outputs 0-7 | 8-15 in order
    const __m256i w = _mm256_packs_epi32(requant8_sat(lo, c), requant8_sat(hi, c));
    const __m256i b = out_signed ? _mm256_packs_epi16(w, w) : _mm256_packus_epi16(w, w);
    store_first(_mm256_castsi256_si128(_mm256_permute4x64_epi64(b, 0x08)), out, n);
}

// Column stride S, 16 outputs a step: row by row, or for S = 1 and flat != nullptr over
// the padded plane read as one flat row (small planes fill the lanes): output f = oy * wp +
// ox, columns ox >= ow dropped when the rows are copied out of `flat` (oh * wp + 16 bytes).
template <int NP, int S>
void plane(const uint8_t* xp, int64_t wp, const Pairs& ps, const ConvGeom& g, const Chan& c,
           bool out_signed, uint8_t* out, uint8_t* flat) {
    __m256i lo, hi;
    if (flat) {
        const int64_t nf = (g.oh - 1) * wp + g.ow;
        for (int64_t f = 0; f < nf; f += 16) {
            window16<NP, 1>(xp + f, ps, lo, hi);
            store16(lo, hi, c, out_signed, flat + f, nf - f);
        }
        // rows of up to 16 bytes as whole 16-byte copies, in order, each running into the
        // next row's place (rewritten next); those that would pass the plane's end exact
        int64_t oy = 0;
        if (g.ow <= 16) {
            for (; oy * g.ow + 16 <= g.oh * g.ow; ++oy)
                std::memcpy(out + oy * g.ow, flat + oy * wp, 16);
        }
        for (; oy < g.oh; ++oy)
            std::memcpy(out + oy * g.ow, flat + oy * wp, static_cast<size_t>(g.ow));
        return;
    }
    for (int64_t oy = 0; oy < g.oh; ++oy) {
        const uint8_t* top = xp + oy * g.sh * wp;
        for (int64_t x0 = 0; x0 < g.ow; x0 += 16) {
            window16<NP, S>(top + S * x0, ps, lo, hi);
            store16(lo, hi, c, out_signed, out + oy * g.ow + x0, g.ow - x0);
        }
    }
}

}  // namespace

bool depthwise_avx2_takes(const ConvGeom& g) {
    return (g.sw == 1 || g.sw == 2) && g.kh * g.kw <= 2 * kMaxPairs;
}

void depthwise_plane_avx2(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
                          const RowParams& q, const Requant& r, uint8_t* out,
                          uint8_t* scratch) {
    const Chan c = chan(q.bias[0], q.multiplier[0], q.shift[0], r);
    const int64_t taps = g.kh * g.kw;
    int64_t off[2 * kMaxPairs];
    for (int64_t t = 0; t < taps; ++t) off[t] = t / g.kw * g.dh * wp + t % g.kw * g.dw;
    Pairs ps;
    ps.n = (taps + 1) / 2;
    for (int64_t i = 0; i < ps.n; ++i) pair_of(w, taps, i, off, &ps.a[i], &ps.b[i], &ps.w[i]);
    uint8_t* flat = g.sw == 1 && g.sh == 1 ? scratch : nullptr;
    if (g.sw == 1) {
        if (taps == 9) return plane<5, 1>(xp, wp, ps, g, c, r.out_signed, out, flat);
        if (taps == 25) return plane<13, 1>(xp, wp, ps, g, c, r.out_signed, out, flat);
        return plane<0, 1>(xp, wp, ps, g, c, r.out_signed, out, flat);
    }
    if (taps == 9) return plane<5, 2>(xp, wp, ps, g, c, r.out_signed, out, nullptr);
    if (taps == 25) return plane<13, 2>(xp, wp, ps, g, c, r.out_signed, out, nullptr);
    plane<0, 2>(xp, wp, ps, g, c, r.out_signed, out, nullptr);
}

}  // namespace int8
}  // namespace tianyuan
