// AVX-VNNI tile of the int8 convolution (layouts in int8_cgemm.h): the AVX2 tile's shape with
// the VEX-encoded vpdpbusd, for CPUs that have it without AVX-512 (Intel's client cores since
// Alder Lake, E-core Xeons). vpdpbusd sums a lane's 4 u8 x s8 products into its s32
// accumulator in one exact operation, so full-range 8-bit weights need neither the AVX2 tile's
// even/odd split nor the narrow form (NarrowWeights), and the tile reads the packed bytes:
// per k-quad, one 32-bit weight broadcast and one vpdpbusd per 8 positions and channel. All 6
// channels of a block run in one pass over 16 positions (12 accumulators, no vector of ones
// as the narrow tile needs, so nothing spills). The store requantizes lane for lane as
// reference.requantize (int8_requant_avx2.h), as the AVX2 tiles do.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm.h"
#include "int8_requant_avx2.h"

namespace tianyuan {
namespace int8 {
namespace {

#define TY_VDOT(i)                                                                     \
    if (R > i) {                                                                       \
        int32_t word;                                                                  \
        std::memcpy(&word, wq + i * kGroup, sizeof(word));                             \
        const __m256i w = _mm256_set1_epi32(word);                                     \
        c##i##0 = _mm256_dpbusd_avx_epi32(c##i##0, x0, w);                             \
        if (P > 1) c##i##1 = _mm256_dpbusd_avx_epi32(c##i##1, x1, w);                  \
    }
#define TY_VSTORE(i)                                                                   \
    if (R > i) {                                                                       \
        const Chan cq = chan(q.bias[i], q.multiplier[i], q.shift[i], r);               \
        const __m128i y = pack16(requant8(c##i##0, cq), P > 1 ? requant8(c##i##1, cq) : z, \
                                 r.out_signed);                                        \
        if (npos > 0) store_first(y, out + i * ldo, npos);                             \
    }

// R channels (the rows of the packed block w) x 8P positions.
template <int R, int P>
void sub_tile(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t rows,
              int64_t nq, int64_t npos, const RowParams& q, const Requant& r, uint8_t* out,
              int64_t ldo) {
    const __m256i z = _mm256_setzero_si256();
    __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    __m256i c40 = z, c41 = z, c50 = z, c51 = z;
#pragma GCC unroll 4
    for (int64_t g = 0; g < nq; ++g) {
        const uint8_t* a = acts + qoff[g];
        const int8_t* wq = w + g * rows * kGroup;
        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
        const __m256i x1 =
            P > 1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32)) : z;
        TY_VDOT(0) TY_VDOT(1) TY_VDOT(2) TY_VDOT(3) TY_VDOT(4) TY_VDOT(5)
    }
    TY_VSTORE(0) TY_VSTORE(1) TY_VSTORE(2) TY_VSTORE(3) TY_VSTORE(4) TY_VSTORE(5)
}

#undef TY_VDOT
#undef TY_VSTORE

using SubFn = void (*)(const uint8_t*, const int64_t*, const int8_t*, int64_t, int64_t,
                       int64_t, const RowParams&, const Requant&, uint8_t*, int64_t);

template <int P>
SubFn pick(int64_t rows) {
    switch (rows) {
        case 1: return sub_tile<1, P>;
        case 2: return sub_tile<2, P>;
        case 3: return sub_tile<3, P>;
        case 4: return sub_tile<4, P>;
        case 5: return sub_tile<5, P>;
        default: return sub_tile<6, P>;
    }
}

}  // namespace

void cgemm_tile_avxvnni(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp,
                        int64_t rows, int64_t npos, const RowParams& q, const Requant& r,
                        uint8_t* out, int64_t ldo) {
    for (int64_t p0 = 0; p0 < npos; p0 += 16) {
        const SubFn fn = npos - p0 > 8 ? pick<2>(rows) : pick<1>(rows);
        fn(acts + p0 * kGroup, qoff, w, rows, kp / kGroup, npos - p0, q, r, out + p0, ldo);
    }
}

int64_t avxvnni_peak_steps(int64_t steps) {
    // As vnni_peak_steps on ymm: 12 independent vpdpbusd chains in inline assembly.
    __m256i c0 = _mm256_set1_epi32(static_cast<int32_t>(steps)), c1 = c0, c2 = c0, c3 = c0,
            c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
    const __m256i x = _mm256_set1_epi8(1), w = _mm256_set1_epi8(1);
    for (int64_t s = 0; s < steps; ++s) {
        __asm__ volatile(
            "%{vex%} vpdpbusd %[w], %[x], %[c0]\n\t%{vex%} vpdpbusd %[w], %[x], %[c1]\n\t"
            "%{vex%} vpdpbusd %[w], %[x], %[c2]\n\t%{vex%} vpdpbusd %[w], %[x], %[c3]\n\t"
            "%{vex%} vpdpbusd %[w], %[x], %[c4]\n\t%{vex%} vpdpbusd %[w], %[x], %[c5]\n\t"
            "%{vex%} vpdpbusd %[w], %[x], %[c6]\n\t%{vex%} vpdpbusd %[w], %[x], %[c7]\n\t"
            "%{vex%} vpdpbusd %[w], %[x], %[c8]\n\t%{vex%} vpdpbusd %[w], %[x], %[c9]\n\t"
            "%{vex%} vpdpbusd %[w], %[x], %[c10]\n\t%{vex%} vpdpbusd %[w], %[x], %[c11]"
            : [c0] "+x"(c0), [c1] "+x"(c1), [c2] "+x"(c2), [c3] "+x"(c3), [c4] "+x"(c4),
              [c5] "+x"(c5), [c6] "+x"(c6), [c7] "+x"(c7), [c8] "+x"(c8), [c9] "+x"(c9),
              [c10] "+x"(c10), [c11] "+x"(c11)
            : [x] "x"(x), [w] "x"(w));
    }
    __m256i sum = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
    sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_add_epi32(c4, c5), c6));
    sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_add_epi32(c7, c8), c9));
    sum = _mm256_add_epi32(sum, _mm256_add_epi32(c10, c11));
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
    int64_t total = 0;
    for (int32_t v : lanes) total += v;
    return total;
}

}  // namespace int8
}  // namespace tianyuan
