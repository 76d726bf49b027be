// AVX-512BW activation block pack for the int8 convolution (layout in int8_cgemm.h).
// Per k-quad: 4 rows of 64 positions are gathered into zmm registers (stride 1: masked
// loads merged at the run's place; stride 2: even bytes via vpmovwb through a small
// buffer), then interleaved so each 32-bit lane holds 4 consecutive k of one position.
#include <immintrin.h>

#include <cstdint>

#include "int8_cgemm.h"

namespace tianyuan {
namespace int8 {
namespace {

inline __mmask64 low_bits(int64_t n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

// Stride 2: len <= 64 bytes src[0], src[2], ... -> buf[0..len).
inline __m512i even_bytes(const uint8_t* src, int64_t len) {
    const int64_t bytes = 2 * len - 1;
    const __m512i lo = _mm512_maskz_loadu_epi8(low_bits(bytes), src);
    const __m512i hi = _mm512_maskz_loadu_epi8(low_bits(bytes > 64 ? bytes - 64 : 0), src + 64);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(lo)),
                              _mm512_cvtepi16_epi8(hi), 1);
}

// One k row of the block: 64 positions.
inline __m512i gather_row(const uint8_t* src, const Run* runs, int64_t nruns, int64_t sw) {
    if (sw == 1) {
        __m512i v = _mm512_setzero_si512();
        for (int64_t i = 0; i < nruns; ++i) {
            const __mmask64 m = low_bits(runs[i].len) << runs[i].dst;
            // masked-off lanes are not read: the pointer below the run is never dereferenced
            v = _mm512_mask_loadu_epi8(v, m, src + runs[i].src - runs[i].dst);
        }
        return v;
    }
    alignas(64) uint8_t row[kPos + 64];
    for (int64_t i = 0; i < nruns; ++i) {
        const Run& u = runs[i];
        if (sw == 2) {
            _mm512_mask_storeu_epi8(row + u.dst, low_bits(u.len), even_bytes(src + u.src, u.len));
        } else {
            for (int64_t t = 0; t < u.len; ++t) row[u.dst + t] = src[u.src + t * sw];
        }
    }
    return _mm512_load_si512(row);
}

}  // namespace

void pack_block_avx512(const uint8_t* xpad, const int64_t* koff, int64_t k, int64_t kp,
                       const Run* runs, int64_t nruns, int64_t sw, uint8_t* buf) {
    for (int64_t q = 0; q < kp; q += kGroup) {
        __m512i r[4];
        for (int64_t t = 0; t < kGroup; ++t) {
            r[t] = q + t < k ? gather_row(xpad + koff[q + t], runs, nruns, sw)
                             : _mm512_setzero_si512();
        }
        // bytes -> (r0, r1, r2, r3) quads; per 128-bit lane L: positions 16L + 0..15
        const __m512i u0 = _mm512_unpacklo_epi8(r[0], r[1]), u1 = _mm512_unpackhi_epi8(r[0], r[1]);
        const __m512i u2 = _mm512_unpacklo_epi8(r[2], r[3]), u3 = _mm512_unpackhi_epi8(r[2], r[3]);
        const __m512i t0 = _mm512_unpacklo_epi16(u0, u2);  // lanes: positions 16L + 0..3
        const __m512i t1 = _mm512_unpackhi_epi16(u0, u2);  // 16L + 4..7
        const __m512i t2 = _mm512_unpacklo_epi16(u1, u3);  // 16L + 8..11
        const __m512i t3 = _mm512_unpackhi_epi16(u1, u3);  // 16L + 12..15
        // 4x4 transpose of 128-bit lanes: panel P = (t0.P, t1.P, t2.P, t3.P)
        const __m512i a = _mm512_shuffle_i32x4(t0, t1, 0x44), b = _mm512_shuffle_i32x4(t0, t1, 0xEE);
        const __m512i c = _mm512_shuffle_i32x4(t2, t3, 0x44), d = _mm512_shuffle_i32x4(t2, t3, 0xEE);
        uint8_t* dst = buf + (q / kGroup) * kPos * kGroup;
        _mm512_storeu_si512(dst, _mm512_shuffle_i32x4(a, c, 0x88));
        _mm512_storeu_si512(dst + 64, _mm512_shuffle_i32x4(a, c, 0xDD));
        _mm512_storeu_si512(dst + 128, _mm512_shuffle_i32x4(b, d, 0x88));
        _mm512_storeu_si512(dst + 192, _mm512_shuffle_i32x4(b, d, 0xDD));
    }
}

}  // namespace int8
}  // namespace tianyuan
