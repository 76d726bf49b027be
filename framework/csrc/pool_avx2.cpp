// Pooling drivers (pool_impl.h), float32, compiled with the avx2 flags.
#include <immintrin.h>

#include <cstdint>

#include "pool.h"
#include "pool_impl.h"

namespace tianyuan {


void pool_max_backward_avx2(const float* grad, const int32_t* argmax, const Pool2dGeometry& g,
                            float* gx) {
    max_backward(grad, argmax, g, gx);
}

namespace {

// take_max on 8 lanes: v where v > best or v is NaN, else best
inline __m256 take_max8(__m256 best, __m256 v) {
    const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                                     _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_ps(best, v, take);
}

// All-ones in the lanes below n (n may be <= 0 or >= 8).
inline __m256i first_lanes(int64_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int32_t k = n < 0 ? 0 : n > 8 ? 8 : static_cast<int32_t>(n);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), lane);
}

// p[0], p[2], ..., p[2 (n - 1)] for n <= 8 lanes, reading no element past p[2 (n - 1)]
inline __m256 load_even(const float* p, int64_t n) {
    const int64_t need = 2 * n - 1;
    const __m256 lo = _mm256_maskload_ps(p, first_lanes(need));
    const __m256 hi = _mm256_maskload_ps(p + 8, first_lanes(need - 8));
    // (lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6) -> lo0 lo2 lo4 lo6 hi0 hi2 hi4 hi6
    const __m256 mixed = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(mixed),
                                                  _MM_SHUFFLE(3, 1, 2, 0)));
}

// max_row with column stride 2, as on AVX-512 (pool_avx512.cpp), 8 outputs at a time.
void max_row_avx2(const float* row, int64_t ow, int64_t kw, int64_t sw, const PoolTaps* cols,
                  int64_t a, int64_t b, float* tmp) {
    if (sw != 2 || b == a) {
        max_row(row, ow, kw, sw, cols, a, b, tmp);
        return;
    }
    for (int64_t ox = 0; ox < a; ++ox) tmp[ox] = max_window(row, cols[ox]);
    for (int64_t ox = b; ox < ow; ++ox) tmp[ox] = max_window(row, cols[ox]);
    const int64_t n = b - a, step = cols[a].step;
    const float* base = row + cols[a].first;
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t lanes = n - i < 8 ? n - i : 8;
        __m256 best = load_even(base + 2 * i, lanes);
        for (int64_t j = 1; j < kw; ++j)
            best = take_max8(best, load_even(base + j * step + 2 * i, lanes));
        _mm256_maskstore_ps(tmp + a + i, first_lanes(lanes), best);
    }
}

// max_cells over the full columns [a, b) of one output row, as on AVX-512
// (pool_avx512.cpp), 8 outputs at a time.
void max_cells_avx2(const float* src, const Pool2dGeometry& g, int64_t y0, int64_t i_lo,
                    int64_t i_hi, int64_t a, int64_t b, float* dst, int32_t* arg) {
    if (g.sw != 1 && g.sw != 2) {
        max_cells(src, g, y0, i_lo, i_hi, a, b, dst, arg);
        return;
    }
    const __m256i lane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32(static_cast<int32_t>(g.sw)));
    for (int64_t ox = a; ox < b; ox += 8) {
        const int64_t lanes = b - ox < 8 ? b - ox : 8;
        const int64_t x0 = ox * g.sw - g.pw;
        __m256 best = _mm256_setzero_ps();
        __m256i index = _mm256_setzero_si256();
        for (int64_t i = i_lo; i < i_hi; ++i) {
            const int64_t row = (y0 + i * g.dh) * g.w + x0;
            for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t at = row + j * g.dw;
                const __m256 v = g.sw == 1 ? _mm256_maskload_ps(src + at, first_lanes(lanes))
                                           : load_even(src + at, lanes);
                const __m256i where =
                    _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(at)), lane);
                if (i == i_lo && j == 0) {  // the first tap (a NaN there takes its own index)
                    best = v;
                    index = where;
                    continue;
                }
                const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                                                 _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                best = _mm256_blendv_ps(best, v, take);
                index = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(index),
                                                             _mm256_castsi256_ps(where), take));
            }
        }
        _mm256_maskstore_ps(dst + ox, first_lanes(lanes), best);
        _mm256_maskstore_epi32(arg + ox, first_lanes(lanes), index);
    }
}

}  // namespace

void pool_max_forward_avx2(const float* x, const Pool2dGeometry& g, float* out,
                           int32_t* argmax) {
    max_forward_by(x, g, out, argmax, max_cells_avx2);
}

void pool_max_values_avx2(const float* x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                          int64_t ow, int64_t kw, int64_t sw, const PoolTaps* rows,
                          const PoolTaps* cols, float* out) {
    max_values_by(x, planes, h, w, oh, ow, kw, sw, rows, cols, out, max_row_avx2);
}

void pool_mean_forward_avx2(const float* x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                            int64_t ow, const PoolSpan* rows, const PoolSpan* cols, float* out) {
    mean_forward(x, planes, h, w, oh, ow, rows, cols, out);
}

void pool_mean_backward_avx2(const float* grad, int64_t planes, int64_t h, int64_t w,
                             int64_t oh, int64_t ow, const PoolSpan* rows, const PoolSpan* cols,
                             float* gx) {
    mean_backward(grad, planes, h, w, oh, ow, rows, cols, gx);
}

}  // namespace tianyuan
