// Pooling drivers (pool_impl.h), float32, compiled with the avx512 flags.
#include <immintrin.h>

#include <cstdint>

#include "pool/pool.h"
#include "pool/pool_impl.h"

namespace tianyuan {

int64_t pool_max_backward_avx512(const float* grad, const int32_t* argmax,
                                 const Pool2dGeometry& g, float* gx) {
    return max_backward(grad, argmax, g, gx);
}

namespace {

inline __mmask16 first_lanes(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// The float vector of max_row_vec and max_cells_vec (pool_impl.h): 16 lanes, masked loads;
// even lanes by one permute of two loads.
struct Avx512Max {
    using F = __m512;
    using I = __m512i;
    using M = __mmask16;
    static constexpr int64_t kLanes = 16;
    static F load(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(first_lanes(n), p); }
    static F even(const float* p, int64_t n) {
        const int64_t need = 2 * n - 1;
        const __m512i pick = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
                                              4, 2, 0);
        return _mm512_permutex2var_ps(load(p, need), pick, load(p + 16, need - 16));
    }
    static I indices(int64_t at, int64_t step) {
        const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1,
                                              0);
        return _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(at)),
                                _mm512_mullo_epi32(lane,
                                                   _mm512_set1_epi32(static_cast<int32_t>(step))));
    }
    // take_max's rule: v where v > best or v is NaN
    static M take(F v, F best) {
        return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    }
    static F select(M m, F v, F best) { return _mm512_mask_mov_ps(best, m, v); }
    static I select_index(M m, I v, I best) { return _mm512_mask_mov_epi32(best, m, v); }
    static void store(float* p, int64_t n, F v) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }
    static void store_index(int32_t* p, int64_t n, I v) {
        _mm512_mask_storeu_epi32(p, first_lanes(n), v);
    }
};

}  // namespace

void pool_max_forward_avx512(const float* x, const Pool2dGeometry& g, float* out,
                             int32_t* argmax) {
    max_forward_by(x, g, out, argmax, max_cells_vec<Avx512Max>);
}

void pool_max_values_avx512(const float* x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                          int64_t ow, int64_t kw, int64_t sw, const PoolTaps* rows,
                          const PoolTaps* cols, float* out) {
    max_values_by(x, planes, h, w, oh, ow, kw, sw, rows, cols, out, max_row_vec<Avx512Max>);
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
