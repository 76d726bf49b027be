// AVX512-VNNI int8 GEMM block: vpdpbusd (u8 x s8, 4 products summed into s32) is exact:
// each lane adds 4 products of at most 255*128 to an s32 accumulator, no int16 stage.
// Micro tile: R rows x P panels (up to 6 x 4 = 24 zmm accumulators); each step loads P
// weight groups (16 channels x 4 k) and broadcasts 4 activation bytes per row.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_gemm.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int kRows = 6;
constexpr int kPanels = 4;

template <int R, int P>
void tile(const uint8_t* a, int64_t lda, const int8_t* b, int64_t kp, int32_t* c, int64_t ldc) {
    __m512i acc[R][P];
    for (int i = 0; i < R; ++i) {
        for (int j = 0; j < P; ++j) acc[i][j] = _mm512_setzero_si512();
    }
    const int64_t panel_stride = kp * kPanel;
    for (int64_t g = 0; g < kp / kGroup; ++g) {
        __m512i w[P];
        for (int j = 0; j < P; ++j) {
            w[j] = _mm512_loadu_si512(b + j * panel_stride + g * kPanel * kGroup);
        }
        for (int i = 0; i < R; ++i) {
            int32_t four;
            std::memcpy(&four, a + i * lda + g * kGroup, sizeof(four));
            const __m512i x = _mm512_set1_epi32(four);
            for (int j = 0; j < P; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], x, w[j]);
        }
    }
    for (int i = 0; i < R; ++i) {
        for (int j = 0; j < P; ++j) _mm512_storeu_si512(c + i * ldc + j * kPanel, acc[i][j]);
    }
}

using TileFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int32_t*, int64_t);

template <int R>
TileFn pick_panels(int64_t p) {
    switch (p) {
        case 1: return tile<R, 1>;
        case 2: return tile<R, 2>;
        case 3: return tile<R, 3>;
        default: return tile<R, 4>;
    }
}

TileFn pick(int64_t rows, int64_t panels) {
    switch (rows) {
        case 1: return pick_panels<1>(panels);
        case 2: return pick_panels<2>(panels);
        case 3: return pick_panels<3>(panels);
        case 4: return pick_panels<4>(panels);
        case 5: return pick_panels<5>(panels);
        default: return pick_panels<6>(panels);
    }
}

}  // namespace

void gemm_block_vnni(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b,
                     int64_t kp, int64_t npanels, int32_t* c, int64_t ldc) {
    for (int64_t p = 0; p < npanels; p += kPanels) {
        const int64_t np = npanels - p < kPanels ? npanels - p : kPanels;
        for (int64_t i = 0; i < rows; i += kRows) {
            const int64_t r = rows - i < kRows ? rows - i : kRows;
            pick(r, np)(a + i * lda, lda, b + p * kp * kPanel, kp, c + i * ldc + p * kPanel, ldc);
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
