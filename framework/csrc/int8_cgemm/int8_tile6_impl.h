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

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_requant_avx2.h"

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
        const __m256i y0 = requant8_sat_t(c##i##0, cs[i]);                             \
        const __m256i y1 = P > 1 ? requant8_sat_t(c##i##1, cs[i]) : z;                 \
        store_first(pack16(y0, y1, r.out_signed), out + i * ldo, npos);                \
    }

// The weights are prefetched 2 KB ahead (where they pass L2, as ResNet-18's 7x7 layers'
// 2.4 MB do, the stream comes from memory), as in the VNNI tile (bench/RESULTS.md, int8
// kernels: weights prefetched).
constexpr int64_t kWeightAhead = 2048;

// R channels (the rows of the packed block w; cs: their requantization) x 8P positions from
// acts.
template <class Dot, int R, int P>
void tile6_sub(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t rows,
               int64_t nq, int64_t npos, const RowParams& q, const Chan* cs, const Requant& r,
               uint8_t* out, int64_t ldo) {
    const __m256i z = _mm256_setzero_si256();
    // the sums start at the bias (the store's requant8_sat_t takes acc + bias)
    const __m256i b0 = cs[0].bias, b1 = R > 1 ? cs[1].bias : z, b2 = R > 2 ? cs[2].bias : z,
                  b3 = R > 3 ? cs[3].bias : z, b4 = R > 4 ? cs[4].bias : z,
                  b5 = R > 5 ? cs[5].bias : z;
    __m256i c00 = b0, c01 = b0, c10 = b1, c11 = b1, c20 = b2, c21 = b2, c30 = b3, c31 = b3;
    __m256i c40 = b4, c41 = b4, c50 = b5, c51 = b5;
#pragma GCC unroll 4
    for (int64_t g = 0; g < nq; ++g) {
        const uint8_t* a = acts + qoff[g];
        const int8_t* wq = w + g * rows * kGroup;
        _mm_prefetch(reinterpret_cast<const char*>(wq + kWeightAhead), _MM_HINT_T0);
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
                         int64_t, const RowParams&, const Chan*, const Requant&, uint8_t*,
                         int64_t);

// N (<= kFewMax) positions the other way round, for the last few of a block: per k-quad, the
// block's rows' weights as one vector (lane i: channel i's 4 bytes; past `rows`, the next
// quads', or masked zeros near the block's end: lanes never read) against each position's 4
// activation bytes broadcast, one Dot::step per position where a step of the register tile
// spends one per channel on 8 lanes; then each channel's residual quads (the N positions' 16
// bytes in one load: the last few of a block start at a multiple of 8, at most kPos - 8) and
// the scalar requantization (requant_one, the reference's formula). The lanes' int32 sums
// wrap as the register tile's do. A block's last 1-4 positions so cost about half of a step
// of 8 (bench/RESULTS.md, int8 kernels: AVX2, the last positions the other way round).
constexpr int64_t kFewMax = 4;

template <class Dot, int N>
void tile6_few(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t rows,
               int64_t nq, const RowParams& q, const Requant& r, uint8_t* out, int64_t ldo) {
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(rows)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i c[N];
    for (int p = 0; p < N; ++p) c[p] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int64_t g = 0; g < nq; ++g) {
        const uint8_t* a = acts + qoff[g];
        // past the quad's rows, the next quads' (lanes whose sums are never read), while
        // those are the block's
        const int* wq = reinterpret_cast<const int*>(w + g * rows * kGroup);
        const __m256i wv = g * rows + 8 <= nq * rows
                               ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq))
                               : _mm256_maskload_epi32(wq, live);
        for (int p = 0; p < N; ++p) {
            int32_t word;
            std::memcpy(&word, a + p * kGroup, sizeof(word));
            c[p] = Dot::step(c[p], _mm256_set1_epi32(word), wv);
        }
    }
    alignas(32) uint32_t sums[N][8];
    for (int p = 0; p < N; ++p) _mm256_store_si256(reinterpret_cast<__m256i*>(sums[p]), c[p]);
    for (int64_t i = 0; i < rows; ++i) {
        if (q.res_ptr && q.res_ptr[i] < q.res_ptr[i + 1]) {
            __m256i acc = _mm256_setzero_si256();
            for (int32_t e = q.res_ptr[i]; e < q.res_ptr[i + 1]; ++e) {
                const __m128i x = _mm_loadu_si128(
                    reinterpret_cast<const __m128i*>(acts + qoff[q.res[2 * e]]));
                acc = Dot::step(acc, _mm256_castsi128_si256(x),
                                _mm256_set1_epi32(q.res[2 * e + 1]));
            }
            alignas(32) uint32_t rest[8];
            _mm256_store_si256(reinterpret_cast<__m256i*>(rest), acc);
            for (int p = 0; p < N; ++p) sums[p][i] += rest[p];
        }
        for (int p = 0; p < N; ++p)
            out[i * ldo + p] = requant_one(static_cast<int32_t>(sums[p][i]), q.bias[i],
                                           q.multiplier[i], q.shift[i], r);
    }
}

using FewFn = void (*)(const uint8_t*, const int64_t*, const int8_t*, int64_t, int64_t,
                       const RowParams&, const Requant&, uint8_t*, int64_t);

template <class Dot>
FewFn tile6_few_pick(int64_t n) {
    switch (n) {
        case 1: return tile6_few<Dot, 1>;
        case 2: return tile6_few<Dot, 2>;
        case 3: return tile6_few<Dot, 3>;
        default: return tile6_few<Dot, 4>;
    }
}

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

// The tile (the CTileFn contract in int8_cgemm.h): 16 positions a step; of the last 1-15,
// 8 in a step of 8 and the rest (<= kFewMax) by tile6_few, or all in one step of 8 or 16.
// A step costs the same per lane whether its lanes are used or not; tile6_few costs one
// Dot::step per position (the register tile's 8 lanes: one per channel, 6).
template <class Dot>
void tile6(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp, int64_t rows,
           int64_t npos, const RowParams& q, const Requant& r, uint8_t* out, int64_t ldo) {
    const int64_t nq = kp / kGroup;
    int64_t p0 = 0;
    for (int64_t i = 0; i < rows && q.ahead; ++i)  // the lines ahead, for writing
        __builtin_prefetch(out + i * ldo + q.ahead, 1, 3);
    Chan local[kOcBlock];  // once per call, not per 16 positions, unless made per convolution
    const Chan* cs = reinterpret_cast<const Chan*>(q.chans);
    if (!cs) {
        for (int64_t i = 0; i < rows && npos > kFewMax; ++i)
            local[i] = chan(q.bias[i], q.multiplier[i], q.shift[i], r);
        cs = local;
    }
    for (; npos - p0 >= 16; p0 += 16) {
        tile6_pick<Dot, 2>(rows)(acts + p0 * kGroup, qoff, w, rows, nq, 16, q, cs, r, out + p0,
                                 ldo);
    }
    int64_t left = npos - p0;
    if (left > 8 + kFewMax) {
        tile6_pick<Dot, 2>(rows)(acts + p0 * kGroup, qoff, w, rows, nq, left, q, cs, r,
                                 out + p0, ldo);
        return;
    }
    if (left > kFewMax) {
        tile6_pick<Dot, 1>(rows)(acts + p0 * kGroup, qoff, w, rows, nq, left < 8 ? left : 8, q,
                                 cs, r, out + p0, ldo);
        p0 += 8;
        left -= 8;
    }
    if (left > 0) {
        tile6_few_pick<Dot>(left)(acts + p0 * kGroup, qoff, w, rows, nq, q, r, out + p0, ldo);
    }
}

}  // namespace
}  // namespace int8
}  // namespace tianyuan
