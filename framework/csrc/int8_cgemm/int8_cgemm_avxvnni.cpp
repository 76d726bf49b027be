// AVX-VNNI tile of the int8 convolution (layouts in int8_cgemm.h): the AVX2 tile's shape with
// the VEX-encoded vpdpbusd, for CPUs that have it without AVX-512 (Intel's client cores since
// Alder Lake, E-core Xeons). vpdpbusd sums a lane's 4 u8 x s8 products into its s32
// accumulator in one exact operation, so full-range 8-bit weights need neither the AVX2 tile's
// even/odd split nor the narrow form (NarrowWeights), and the tile reads the packed bytes:
// per k-quad, one 32-bit weight broadcast and one vpdpbusd per 8 positions and channel, in
// the narrow tile's register tile (int8_tile6_impl.h: 6 channels x 16 positions; no vector
// of ones here, so none of the 12 accumulators spills). Also the linear layers' GEMM block.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_gemm.h"
#include "int8_cgemm/int8_tile6_impl.h"

namespace tianyuan {
namespace int8 {
namespace {

struct VnniDot {
    static __m256i step(__m256i acc, __m256i x, __m256i w) {
        return _mm256_dpbusd_avx_epi32(acc, x, w);
    }
};

// The linear layers' GEMM block (int8_gemm.h): R rows (up to 6) x one panel of 16 channels
// in 2R accumulators; per k-quad, the panel's 64 weight bytes (two ymm: lane j holds channel
// j's 4 bytes) and each row's 4 activation bytes broadcast, one vpdpbusd per 8 channels.
#define TY_GEMM_ROW(i)                                                                 \
    if (R > i) {                                                                       \
        int32_t four;                                                                  \
        std::memcpy(&four, a + i * lda + g * kGroup, sizeof(four));                    \
        const __m256i x = _mm256_set1_epi32(four);                                     \
        c##i##0 = _mm256_dpbusd_avx_epi32(c##i##0, x, w0);                             \
        c##i##1 = _mm256_dpbusd_avx_epi32(c##i##1, x, w1);                             \
    }
#define TY_GEMM_STORE(i)                                                               \
    if (R > i) {                                                                       \
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * ldc), c##i##0);         \
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * ldc + 8), c##i##1);     \
    }

template <int R>
void gemm_tile(const uint8_t* a, int64_t lda, const int8_t* b, int64_t kp, int32_t* c,
               int64_t ldc) {
    const __m256i z = _mm256_setzero_si256();
    __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    __m256i c40 = z, c41 = z, c50 = z, c51 = z;
    for (int64_t g = 0; g < kp / kGroup; ++g) {
        const int8_t* grp = b + g * kPanel * kGroup;
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + 32));
        TY_GEMM_ROW(0) TY_GEMM_ROW(1) TY_GEMM_ROW(2) TY_GEMM_ROW(3) TY_GEMM_ROW(4)
        TY_GEMM_ROW(5)
    }
    TY_GEMM_STORE(0) TY_GEMM_STORE(1) TY_GEMM_STORE(2) TY_GEMM_STORE(3) TY_GEMM_STORE(4)
    TY_GEMM_STORE(5)
}

#undef TY_GEMM_ROW
#undef TY_GEMM_STORE

constexpr int64_t kGemmRows = 6;

using GemmTileFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int32_t*, int64_t);

GemmTileFn gemm_pick(int64_t rows) {
    switch (rows) {
        case 1: return gemm_tile<1>;
        case 2: return gemm_tile<2>;
        case 3: return gemm_tile<3>;
        case 4: return gemm_tile<4>;
        case 5: return gemm_tile<5>;
        default: return gemm_tile<6>;
    }
}

}  // namespace

void gemm_block_avxvnni(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b,
                        int64_t kp, int64_t npanels, int32_t* c, int64_t ldc) {
    for (int64_t p = 0; p < npanels; ++p) {
        for (int64_t i = 0; i < rows; i += kGemmRows) {
            const int64_t r = rows - i < kGemmRows ? rows - i : kGemmRows;
            gemm_pick(r)(a + i * lda, lda, b + p * kp * kPanel, kp, c + i * ldc + p * kPanel,
                         ldc);
        }
    }
}

void cgemm_tile_avxvnni(const uint8_t* acts, const int64_t* qoff, const int8_t* w, int64_t kp,
                        int64_t rows, int64_t npos, const RowParams& q, const Requant& r,
                        uint8_t* out, int64_t ldo) {
    tile6<VnniDot>(acts, qoff, w, kp, rows, npos, q, r, out, ldo);
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
