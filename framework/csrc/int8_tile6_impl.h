// The register tile that the AVX2 narrow tile (int8_cgemm_avx2.cpp) and the AVX-VNNI tile
// (int8_cgemm_avxvnni.cpp) share: a block's channels (<= 6) x 16 positions in one pass over
// the packed activations, 12 named accumulators (GCC keeps arrays of vectors in memory). Per
// k-quad, the positions' bytes (two ymm), one 32-bit broadcast of each channel's 4 weight
// bytes, and Dot::step(acc, x, w), which adds each 32-bit lane's 4 u8 x s8 products to acc;
// then each channel's residual quads (RowParams.res_ptr, NarrowWeights; null on paths that
// take none) through the same step, and the store, which requantizes lane for lane as
// reference.requantize. Each unit includes this file with its ISA's flags and its own Dot;
// everything is in an anonymous namespace, so no copy built with one unit's flags can be
// linked into another.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm.h"
#include "int8_requant_avx2.h"

namespace tianyuan {
namespace int8 {
namespace {

#define TY_T6_DOT(i)                                                                   \
    if (R > i) {                                                                       \
        int32_t word;                                                                  \
        std::memcpy(&word, wq + i * kGroup, sizeof(word));                             \
        const __m256i w = _mm256_set1_epi32(word);                                     \
        c##i##0 = Dot::step(c##i##0, x0, w);                                           \
        if (P > 1) c##i##1 = Dot::step(c##i##1, x1, w);                                \
    }
#define TY_T6_RES(i)                                                                   \
    if (R > i)                                                                         \
        for (int32_t e = q.res_ptr[i]; e < q.res_ptr[i + 1]; ++e) {                    \
            const uint8_t* a = acts + qoff[q.res[2 * e]];                              \
            const __m256i w = _mm256_set1_epi32(q.res[2 * e + 1]);                     \
            c##i##0 = Dot::step(c##i##0,                                               \
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)), w); \
            if (P > 1)                                                                 \
                c##i##1 = Dot::step(                                                   \
                    c##i##1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32)), \
                    w);                                                                \
        }
#define TY_T6_STORE(i)                                                                 \
    if (R > i && npos > 0) {                                                           \
        const Chan cq = chan(q.bias[i], q.multiplier[i], q.shift[i], r);               \
        store_first(pack16(requant8(c##i##0, cq), P > 1 ? requant8(c##i##1, cq) : z,   \
                           r.out_signed),                                              \
                    out + i * ldo, npos);                                              \
    }

// R channels (the rows of the packed block w) x 8P positions from acts.
template <class Dot, int R, int P>
void tile6_sub(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t rows,
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
        TY_T6_DOT(0) TY_T6_DOT(1) TY_T6_DOT(2) TY_T6_DOT(3) TY_T6_DOT(4) TY_T6_DOT(5)
    }
    if (q.res_ptr) {
        TY_T6_RES(0) TY_T6_RES(1) TY_T6_RES(2) TY_T6_RES(3) TY_T6_RES(4) TY_T6_RES(5)
    }
    TY_T6_STORE(0) TY_T6_STORE(1) TY_T6_STORE(2) TY_T6_STORE(3) TY_T6_STORE(4) TY_T6_STORE(5)
}

#undef TY_T6_DOT
#undef TY_T6_RES
#undef TY_T6_STORE

using Tile6Fn = void (*)(const uint8_t*, const int64_t*, const int8_t*, int64_t, int64_t,
                         int64_t, const RowParams&, const Requant&, uint8_t*, int64_t);

template <class Dot, int P>
Tile6Fn tile6_pick(int64_t rows) {
    switch (rows) {
        case 1: return tile6_sub<Dot, 1, P>;
        case 2: return tile6_sub<Dot, 2, P>;
        case 3: return tile6_sub<Dot, 3, P>;
        case 4: return tile6_sub<Dot, 4, P>;
        case 5: return tile6_sub<Dot, 5, P>;
        default: return tile6_sub<Dot, 6, P>;
    }
}

// The tile (the CTileFn contract in int8_cgemm.h): 16 positions a step, the last 8 or 16.
template <class Dot>
void tile6(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp, int64_t rows,
           int64_t npos, const RowParams& q, const Requant& r, uint8_t* out, int64_t ldo) {
    for (int64_t p0 = 0; p0 < npos; p0 += 16) {
        const Tile6Fn fn = npos - p0 > 8 ? tile6_pick<Dot, 2>(rows) : tile6_pick<Dot, 1>(rows);
        fn(acts + p0 * kGroup, qoff, w, rows, kp / kGroup, npos - p0, q, r, out + p0, ldo);
    }
}

}  // namespace
}  // namespace int8
}  // namespace tianyuan
