// AVX2 int8 GEMM block, exact without VNNI. vpmaddubsw would sum two u8*s8 products into
// a saturating int16 (255*127*2 > 32767), so it is not used. Instead each 32-bit lane
// (4 k of one channel) is split into its even and odd bytes widened to int16 (weights
// sign-extended, activations zero-extended) and vpmaddwd sums pairs into int32: at most
// 2*255*128 per pair, exact. Micro tile: R rows (up to 4) x one panel (2 ymm of 8 channels).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_gemm.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int kRows = 4;

template <int R>
void tile(const uint8_t* a, int64_t lda, const int8_t* b, int64_t kp, int32_t* c, int64_t ldc) {
    __m256i acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (int64_t g = 0; g < kp / kGroup; ++g) {
        const int8_t* grp = b + g * kPanel * kGroup;
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + 32));
        // bytes 0, 2 (even) and 1, 3 (odd) of every lane as sign-extended int16
        const __m256i w0e = _mm256_srai_epi16(_mm256_slli_epi16(w0, 8), 8);
        const __m256i w0o = _mm256_srai_epi16(w0, 8);
        const __m256i w1e = _mm256_srai_epi16(_mm256_slli_epi16(w1, 8), 8);
        const __m256i w1o = _mm256_srai_epi16(w1, 8);
        for (int i = 0; i < R; ++i) {
            uint32_t four;
            std::memcpy(&four, a + i * lda + g * kGroup, sizeof(four));
            const __m256i xe = _mm256_set1_epi32(static_cast<int32_t>(four & 0x00FF00FFu));
            const __m256i xo = _mm256_set1_epi32(static_cast<int32_t>((four >> 8) & 0x00FF00FFu));
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(xe, w0e));
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(xo, w0o));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(xe, w1e));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(xo, w1o));
        }
    }
    for (int i = 0; i < R; ++i) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * ldc), acc[i][0]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * ldc + 8), acc[i][1]);
    }
}

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

}  // namespace int8
}  // namespace tianyuan
