// Pooling drivers (pool_impl.h), float32, compiled with the avx512 flags.
#include <immintrin.h>

#include <cstdint>

#include "pool.h"
#include "pool_impl.h"

namespace tianyuan {


void pool_max_backward_avx512(const float* grad, const int32_t* argmax, const Pool2dGeometry& g,
                            float* gx) {
    max_backward(grad, argmax, g, gx);
}

namespace {

// take_max on 16 lanes: v where v > best or v is NaN, else best
inline __m512 take_max16(__m512 best, __m512 v) {
    const __mmask16 take =
        _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(best, take, v);
}

inline __mmask16 first_lanes(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// p[0], p[2], ..., p[2 (n - 1)] for n <= 16 lanes, reading no element past p[2 (n - 1)]
inline __m512 load_even(const float* p, int64_t n, __m512i even) {
    const int64_t need = 2 * n - 1;
    const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(need), p);
    const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(need - 16), p + 16);
    return _mm512_permutex2var_ps(lo, even, hi);
}

// max_row with column stride 2 (the stem max pools of ResNet and ShuffleNet): every tap of 16
// outputs is two loads and one permute of their even lanes; GCC's strided loop had run the
// whole pool at 11 GB/s.
void max_row_avx512(const float* row, int64_t ow, int64_t kw, int64_t sw, const PoolTaps* cols,
                    int64_t a, int64_t b, float* tmp) {
    if (sw != 2 || b == a) {
        max_row(row, ow, kw, sw, cols, a, b, tmp);
        return;
    }
    for (int64_t ox = 0; ox < a; ++ox) tmp[ox] = max_window(row, cols[ox]);
    for (int64_t ox = b; ox < ow; ++ox) tmp[ox] = max_window(row, cols[ox]);
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const int64_t n = b - a, step = cols[a].step;
    const float* base = row + cols[a].first;
    for (int64_t i = 0; i < n; i += 16) {
        const int64_t lanes = n - i < 16 ? n - i : 16;
        __m512 best = load_even(base + 2 * i, lanes, even);
        for (int64_t j = 1; j < kw; ++j)
            best = take_max16(best, load_even(base + j * step + 2 * i, lanes, even));
        _mm512_mask_storeu_ps(tmp + a + i, first_lanes(lanes), best);
    }
}

// max_cells over the full columns [a, b) of one output row, 16 outputs at a time for column
// strides 1 and 2 (each tap one or two masked loads; value and index taken together under
// take_max's mask, so the same argmax); other strides go to max_cells.
void max_cells_avx512(const float* src, const Pool2dGeometry& g, int64_t y0, int64_t i_lo,
                      int64_t i_hi, int64_t a, int64_t b, float* dst, int32_t* arg) {
    if (g.sw != 1 && g.sw != 2) {
        max_cells(src, g, y0, i_lo, i_hi, a, b, dst, arg);
        return;
    }
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const __m512i lane = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                                             5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(static_cast<int32_t>(g.sw)));
    for (int64_t ox = a; ox < b; ox += 16) {
        const int64_t lanes = b - ox < 16 ? b - ox : 16;
        const int64_t x0 = ox * g.sw - g.pw;
        __m512 best = _mm512_setzero_ps();
        __m512i index = _mm512_setzero_si512();
        for (int64_t i = i_lo; i < i_hi; ++i) {
            const int64_t row = (y0 + i * g.dh) * g.w + x0;
            for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t at = row + j * g.dw;
                const __m512 v = g.sw == 1
                                     ? _mm512_maskz_loadu_ps(first_lanes(lanes), src + at)
                                     : load_even(src + at, lanes, even);
                const __m512i where = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(at)),
                                                       lane);
                if (i == i_lo && j == 0) {  // the first tap (a NaN there takes its own index)
                    best = v;
                    index = where;
                    continue;
                }
                const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                                       _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                best = _mm512_mask_mov_ps(best, take, v);
                index = _mm512_mask_mov_epi32(index, take, where);
            }
        }
        _mm512_mask_storeu_ps(dst + ox, first_lanes(lanes), best);
        _mm512_mask_storeu_epi32(arg + ox, first_lanes(lanes), index);
    }
}

}  // namespace

void pool_max_forward_avx512(const float* x, const Pool2dGeometry& g, float* out,
                             int32_t* argmax) {
    max_forward_by(x, g, out, argmax, max_cells_avx512);
}

void pool_max_values_avx512(const float* x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                          int64_t ow, int64_t kw, int64_t sw, const PoolTaps* rows,
                          const PoolTaps* cols, float* out) {
    max_values_by(x, planes, h, w, oh, ow, kw, sw, rows, cols, out, max_row_avx512);
}

void pool_mean_forward_avx512(const float* x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                            int64_t ow, const PoolSpan* rows, const PoolSpan* cols, float* out) {
    mean_forward(x, planes, h, w, oh, ow, rows, cols, out);
}

void pool_mean_backward_avx512(const float* grad, int64_t planes, int64_t h, int64_t w,
                             int64_t oh, int64_t ow, const PoolSpan* rows, const PoolSpan* cols,
                             float* gx) {
    mean_backward(grad, planes, h, w, oh, ow, rows, cols, gx);
}

}  // namespace tianyuan
