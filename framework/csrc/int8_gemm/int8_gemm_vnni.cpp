// AVX512-VNNI int8 GEMM block: vpdpbusd (u8 x s8, 4 products summed into s32) is exact:
// each lane adds 4 products of at most 255*128 to an s32 accumulator, no int16 stage.
// Micro tile: R rows x P panels (up to 6 x 4 = 24 zmm accumulators); each step loads P
// weight groups (16 channels x 4 k) and broadcasts 4 activation bytes per row.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "int8_gemm/int8_gemm.h"

namespace tianyuan {
namespace int8 {
namespace {

constexpr int kRows = 6;
constexpr int kPanels = 4;

inline __m512i broadcast4(const uint8_t* p) {
    int32_t four;
    std::memcpy(&four, p, sizeof(four));
    return _mm512_set1_epi32(four);
}

// Accumulators are named variables, not an array: GCC keeps arrays of vectors in memory
// and would store all of them every k step.
#define TY_ACC_ROW(i) __m512i c##i##0 = z, c##i##1 = z, c##i##2 = z, c##i##3 = z;
#define TY_DOT_ROW(i)                                                 \
    if (R > i) {                                                      \
        const __m512i x = broadcast4(a + i * lda + g * kGroup);       \
        c##i##0 = _mm512_dpbusd_epi32(c##i##0, x, w0);                \
        if (P > 1) c##i##1 = _mm512_dpbusd_epi32(c##i##1, x, w1);     \
        if (P > 2) c##i##2 = _mm512_dpbusd_epi32(c##i##2, x, w2);     \
        if (P > 3) c##i##3 = _mm512_dpbusd_epi32(c##i##3, x, w3);     \
    }
#define TY_STORE_ROW(i)                                               \
    if (R > i) {                                                      \
        int32_t* ci = c + i * ldc;                                    \
        _mm512_storeu_si512(ci, c##i##0);                             \
        if (P > 1) _mm512_storeu_si512(ci + kPanel, c##i##1);         \
        if (P > 2) _mm512_storeu_si512(ci + 2 * kPanel, c##i##2);     \
        if (P > 3) _mm512_storeu_si512(ci + 3 * kPanel, c##i##3);     \
    }

template <int R, int P>
void tile(const uint8_t* a, int64_t lda, const int8_t* b, int64_t kp, int32_t* c, int64_t ldc) {
    const __m512i z = _mm512_setzero_si512();
    TY_ACC_ROW(0) TY_ACC_ROW(1) TY_ACC_ROW(2) TY_ACC_ROW(3) TY_ACC_ROW(4) TY_ACC_ROW(5)
    const int64_t ps = kp * kPanel;  // bytes between panels
    for (int64_t g = 0; g < kp / kGroup; ++g) {
        const int8_t* grp = b + g * kPanel * kGroup;
        const __m512i w0 = _mm512_loadu_si512(grp);
        const __m512i w1 = P > 1 ? _mm512_loadu_si512(grp + ps) : z;
        const __m512i w2 = P > 2 ? _mm512_loadu_si512(grp + 2 * ps) : z;
        const __m512i w3 = P > 3 ? _mm512_loadu_si512(grp + 3 * ps) : z;
        TY_DOT_ROW(0) TY_DOT_ROW(1) TY_DOT_ROW(2) TY_DOT_ROW(3) TY_DOT_ROW(4) TY_DOT_ROW(5)
    }
    TY_STORE_ROW(0) TY_STORE_ROW(1) TY_STORE_ROW(2) TY_STORE_ROW(3) TY_STORE_ROW(4)
    TY_STORE_ROW(5)
}

#undef TY_ACC_ROW
#undef TY_DOT_ROW
#undef TY_STORE_ROW

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

int64_t vnni_peak_steps(int64_t steps) {
    // 12 accumulators cover vpdpbusd's latency (4-5 cycles) on 2 ports. Inline assembly, as
    // the compiler would merge identical intrinsic chains; operands stay in registers, so
    // the loop measures the instruction, not memory.
    __m512i c0 = _mm512_set1_epi32(static_cast<int32_t>(steps)), c1 = c0, c2 = c0, c3 = c0,
            c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
    const __m512i x = _mm512_set1_epi8(1), w = _mm512_set1_epi8(1);
    for (int64_t s = 0; s < steps; ++s) {
        __asm__ volatile(
            "vpdpbusd %[w], %[x], %[c0]\n\tvpdpbusd %[w], %[x], %[c1]\n\t"
            "vpdpbusd %[w], %[x], %[c2]\n\tvpdpbusd %[w], %[x], %[c3]\n\t"
            "vpdpbusd %[w], %[x], %[c4]\n\tvpdpbusd %[w], %[x], %[c5]\n\t"
            "vpdpbusd %[w], %[x], %[c6]\n\tvpdpbusd %[w], %[x], %[c7]\n\t"
            "vpdpbusd %[w], %[x], %[c8]\n\tvpdpbusd %[w], %[x], %[c9]\n\t"
            "vpdpbusd %[w], %[x], %[c10]\n\tvpdpbusd %[w], %[x], %[c11]"
            : [c0] "+v"(c0), [c1] "+v"(c1), [c2] "+v"(c2), [c3] "+v"(c3), [c4] "+v"(c4),
              [c5] "+v"(c5), [c6] "+v"(c6), [c7] "+v"(c7), [c8] "+v"(c8), [c9] "+v"(c9),
              [c10] "+v"(c10), [c11] "+v"(c11)
            : [x] "v"(x), [w] "v"(w));
    }
    const __m512i sum = _mm512_add_epi32(
        _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                         _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7))),
        _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
    return _mm512_reduce_add_epi32(sum);
}

}  // namespace int8
}  // namespace tianyuan
