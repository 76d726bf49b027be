// AVX2 int8 GEMM block, exact without VNNI. vpmaddubsw would sum two u8*s8 products into
// a saturating int16 (255*127*2 > 32767), so it is not used. Instead each 32-bit lane
// (4 k of one channel) is split into its even and odd bytes widened to int16 (weights
// sign-extended, activations zero-extended) and vpmaddwd sums pairs into int32: at most
// 2*255*128 per pair, exact. Micro tile: R rows (up to 4) x one panel (2 ymm of 8 channels).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_gemm/int8_gemm.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int kRows = 4;

// Even (bytes 0, 2) and odd (bytes 1, 3) activation bytes of one row, zero-extended to int16.
inline void split_row(const uint8_t* p, __m256i& even, __m256i& odd) {
    uint32_t four;
    std::memcpy(&four, p, sizeof(four));
    even = _mm256_set1_epi32(static_cast<int32_t>(four & 0x00FF00FFu));
    odd = _mm256_set1_epi32(static_cast<int32_t>((four >> 8) & 0x00FF00FFu));
}

inline __m256i dot(__m256i acc, __m256i xe, __m256i xo, __m256i we, __m256i wo) {
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(xe, we));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(xo, wo));
}

// Named accumulators (GCC would keep an array of vectors in memory).
#define TY_DOT_ROW(i)                                        \
    if (R > i) {                                             \
        __m256i xe, xo;                                      \
        split_row(a + i * lda + g * kGroup, xe, xo);         \
        c##i##0 = dot(c##i##0, xe, xo, w0e, w0o);            \
        c##i##1 = dot(c##i##1, xe, xo, w1e, w1o);            \
    }
#define TY_STORE_ROW(i)                                                          \
    if (R > i) {                                                                 \
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * ldc), c##i##0);   \
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * ldc + 8), c##i##1); \
    }

template <int R>
void tile(const uint8_t* a, int64_t lda, const int8_t* b, int64_t kp, int32_t* c, int64_t ldc) {
    const __m256i z = _mm256_setzero_si256();
    __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    for (int64_t g = 0; g < kp / kGroup; ++g) {
        const int8_t* grp = b + g * kPanel * kGroup;
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + 32));
        // bytes 0, 2 (even) and 1, 3 (odd) of every lane as sign-extended int16
        const __m256i w0e = _mm256_srai_epi16(_mm256_slli_epi16(w0, 8), 8);
        const __m256i w0o = _mm256_srai_epi16(w0, 8);
        const __m256i w1e = _mm256_srai_epi16(_mm256_slli_epi16(w1, 8), 8);
        const __m256i w1o = _mm256_srai_epi16(w1, 8);
        TY_DOT_ROW(0) TY_DOT_ROW(1) TY_DOT_ROW(2) TY_DOT_ROW(3)
    }
    TY_STORE_ROW(0) TY_STORE_ROW(1) TY_STORE_ROW(2) TY_STORE_ROW(3)
}

#undef TY_DOT_ROW
#undef TY_STORE_ROW

using TileFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int32_t*, int64_t);

TileFn pick(int64_t rows) {
    switch (rows) {
        case 1: return tile<1>;
        case 2: return tile<2>;
        case 3: return tile<3>;
        default: return tile<4>;
    }
}

}  // namespace

void gemm_block_avx2(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b,
                     int64_t kp, int64_t npanels, int32_t* c, int64_t ldc) {
    for (int64_t p = 0; p < npanels; ++p) {
        for (int64_t i = 0; i < rows; i += kRows) {
            const int64_t r = rows - i < kRows ? rows - i : kRows;
            pick(r)(a + i * lda, lda, b + p * kp * kPanel, kp, c + i * ldc + p * kPanel, ldc);
        }
    }
}

int64_t avx2_peak_steps(int64_t steps) {
    // The exact AVX2 product (the conv tile's inner step): vpmaddwd (16 multiply-adds on
    // int16) then vpaddd into an accumulator, 6 chains (the adds' latency is 1 cycle, the
    // products do not depend on the accumulators). Inline assembly, as the compiler would
    // merge identical intrinsic chains.
    __m256i c0 = _mm256_set1_epi32(static_cast<int32_t>(steps)), c1 = c0, c2 = c0, c3 = c0,
            c4 = c0, c5 = c0, t0, t1, t2, t3, t4, t5;
    const __m256i x = _mm256_set1_epi16(1), w = _mm256_set1_epi16(1);
    for (int64_t s = 0; s < steps; ++s) {
        __asm__ volatile(
            "vpmaddwd %[w], %[x], %[t0]\n\tvpmaddwd %[w], %[x], %[t1]\n\t"
            "vpmaddwd %[w], %[x], %[t2]\n\tvpmaddwd %[w], %[x], %[t3]\n\t"
            "vpmaddwd %[w], %[x], %[t4]\n\tvpmaddwd %[w], %[x], %[t5]\n\t"
            "vpaddd %[t0], %[c0], %[c0]\n\tvpaddd %[t1], %[c1], %[c1]\n\t"
            "vpaddd %[t2], %[c2], %[c2]\n\tvpaddd %[t3], %[c3], %[c3]\n\t"
            "vpaddd %[t4], %[c4], %[c4]\n\tvpaddd %[t5], %[c5], %[c5]"
            : [c0] "+x"(c0), [c1] "+x"(c1), [c2] "+x"(c2), [c3] "+x"(c3), [c4] "+x"(c4),
              [c5] "+x"(c5), [t0] "=&x"(t0), [t1] "=&x"(t1), [t2] "=&x"(t2), [t3] "=&x"(t3),
              [t4] "=&x"(t4), [t5] "=&x"(t5)
            : [x] "x"(x), [w] "x"(w));
    }
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), c2),
                                         _mm256_add_epi32(_mm256_add_epi32(c3, c4), c5));
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
    int64_t total = 0;
    for (int32_t v : lanes) total += v;
    return total;
}

}  // namespace int8
}  // namespace tianyuan
