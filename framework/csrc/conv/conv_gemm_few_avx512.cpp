// AVX-512 register block, weight packer and transposing store of the direct GEMM
// convolution's few-positions plan (conv_gemm.h): vectors over output channels, positions
// broadcast, so that 49 or 196 positions fill whole blocks of kFewMr. Per reduction row: V
// vector loads of packed weights, kFewMr broadcasts of positions, kFewMr * V multiply-adds
// into kFewMr * V zmm (at V = 4, GCC keeps one of the 28 in memory: 33 values for 32
// registers; its load-add-store chain is shorter than the row's 14 cycles of multiply-adds).
#include <immintrin.h>

#include <cstdint>

#include "conv/conv_gemm.h"
#include "conv/transpose_avx512.h"

namespace tianyuan {
namespace {

template <int V>
void block(const float* xt, const float* wt, int64_t kc, float* acc, bool first) {
    __m512 c[kFewMr][V];
#pragma GCC unroll 7
    for (int i = 0; i < kFewMr; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v)
            c[i][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + i * kFewNr + 16 * v);
    for (int64_t k = 0; k < kc; ++k) {
        __m512 b[V];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) b[v] = _mm512_load_ps(wt + k * kFewNr + 16 * v);
#pragma GCC unroll 7
        for (int i = 0; i < kFewMr; ++i) {
            const __m512 a = _mm512_set1_ps(xt[k * kConvGemmNr + i]);
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) c[i][v] = _mm512_fmadd_ps(a, b[v], c[i][v]);
        }
    }
#pragma GCC unroll 7
    for (int i = 0; i < kFewMr; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) _mm512_store_ps(acc + i * kFewNr + 16 * v, c[i][v]);
}

void kernel(const float* xt, const float* wt, int64_t kc, int64_t vectors, float* acc,
            bool first) {
    switch (vectors) {
        case 1: return block<1>(xt, wt, kc, acc, first);
        case 2: return block<2>(xt, wt, kc, acc, first);
        case 3: return block<3>(xt, wt, kc, acc, first);
        default: return block<4>(xt, wt, kc, acc, first);
    }
}

inline __mmask16 lanes(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// dst[kk][j] = w[c0 + j][k0 + kk] for kk < kc, j < kFewNr (zero for rows >= co): 16 rows by
// 16 columns at a time, transposed in registers.
void pack_weights(const float* w, int64_t co, int64_t depth, int64_t c0, int64_t k0,
                  int64_t kc, float* dst) {
    for (int64_t j0 = 0; j0 < kFewNr; j0 += 16) {
        const int64_t rows = co - c0 - j0 < 16 ? co - c0 - j0 : 16;
        for (int64_t kk0 = 0; kk0 < kc; kk0 += 16) {
            const int64_t n = kc - kk0 < 16 ? kc - kk0 : 16;
            __m512 r[16];
            for (int i = 0; i < 16; ++i)
                r[i] = i < rows ? _mm512_maskz_loadu_ps(lanes(n),
                                                        w + (c0 + j0 + i) * depth + k0 + kk0)
                                : _mm512_setzero_ps();
            transpose16(r);
            for (int64_t j = 0; j < n; ++j)
                _mm512_store_ps(dst + (kk0 + j) * kFewNr + j0, r[j]);
        }
    }
}

// o[c * ldo + i] = act(scale[c] * acc[i * kFewNr + c] + shift[c]) for i < np, c < nc: per 16
// channels, the epilogue on the block's rows, then a transpose in registers and a masked store
// of np positions per channel.
void store(const float* acc, int64_t np, int64_t nc, const float* scale, const float* shift,
           int act, float* o, int64_t ldo) {
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    const __mmask16 row = lanes(np);
    for (int64_t c0 = 0; c0 < nc; c0 += 16) {
        const __mmask16 cm = lanes(nc - c0);
        const __m512 sc = scale ? _mm512_maskz_loadu_ps(cm, scale + c0) : zero;
        const __m512 sh = shift ? _mm512_maskz_loadu_ps(cm, shift + c0) : zero;
        __m512 r[16];
        for (int i = 0; i < 16; ++i) {
            if (i >= np) {
                r[i] = zero;
                continue;
            }
            __m512 v = _mm512_load_ps(acc + i * kFewNr + c0);  // rounded as conv_gemm's
            if (scale && shift)
                v = _mm512_fmadd_ps(v, sc, sh);
            else if (scale)
                v = _mm512_mul_ps(v, sc);
            else if (shift)
                v = _mm512_add_ps(v, sh);
            if (act >= 1) v = _mm512_max_ps(v, zero);
            if (act == 2) v = _mm512_min_ps(v, six);
            r[i] = v;
        }
        transpose16(r);
        const int64_t n = nc - c0 < 16 ? nc - c0 : 16;
        for (int64_t c = 0; c < n; ++c) _mm512_mask_storeu_ps(o + (c0 + c) * ldo, row, r[c]);
    }
}

}  // namespace

ConvGemmFewKernel conv_gemm_few_kernel_avx512() { return kernel; }
ConvGemmFewPackWeights conv_gemm_few_pack_weights_avx512() { return pack_weights; }
ConvGemmFewStore conv_gemm_few_store_avx512() { return store; }

}  // namespace tianyuan
