// A 16 x 16 float transpose in AVX-512 registers, for the units compiled with AVX-512 flags
// only (static inline: each unit keeps its own copy).
#pragma once

#include <immintrin.h>

namespace tianyuan {

// r[i] holds row i of a 16 x 16 block; afterwards r[j] holds its column j.
static inline void transpose16(__m512 r[16]) {
    __m512 a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        const __m512d a0 = _mm512_castps_pd(a[i]), a1 = _mm512_castps_pd(a[i + 1]);
        const __m512d a2 = _mm512_castps_pd(a[i + 2]), a3 = _mm512_castps_pd(a[i + 3]);
        b[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
        b[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
        b[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
        b[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
    }
    // b[4q + s] holds, per 128-bit lane L, column 4L + s of rows 4q .. 4q + 3
    for (int s = 0; s < 4; ++s) {
        const __m512 lo01 = _mm512_shuffle_f32x4(b[s], b[4 + s], 0x44);
        const __m512 hi01 = _mm512_shuffle_f32x4(b[s], b[4 + s], 0xEE);
        const __m512 lo23 = _mm512_shuffle_f32x4(b[8 + s], b[12 + s], 0x44);
        const __m512 hi23 = _mm512_shuffle_f32x4(b[8 + s], b[12 + s], 0xEE);
        r[s] = _mm512_shuffle_f32x4(lo01, lo23, 0x88);
        r[4 + s] = _mm512_shuffle_f32x4(lo01, lo23, 0xDD);
        r[8 + s] = _mm512_shuffle_f32x4(hi01, hi23, 0x88);
        r[12 + s] = _mm512_shuffle_f32x4(hi01, hi23, 0xDD);
    }
}

}  // namespace tianyuan
