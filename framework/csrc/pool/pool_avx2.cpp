// Pooling drivers (pool_impl.h), float32, compiled with the avx2 flags.
#include <immintrin.h>

#include <cstdint>

#include "pool/pool.h"
#include "pool/pool_impl.h"

namespace tianyuan {

int64_t pool_max_backward_avx2(const float* grad, const int32_t* argmax,
                               const Pool2dGeometry& g, float* gx) {
    return max_backward(grad, argmax, g, gx);
}

namespace {

// All-ones in the lanes below n (n may be <= 0 or >= 8).
inline __m256i first_lanes(int64_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int32_t k = n < 0 ? 0 : n > 8 ? 8 : static_cast<int32_t>(n);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), lane);
}

// The float vector of max_row_vec and max_cells_vec (pool_impl.h): 8 lanes, masked loads;
// even lanes by a shuffle and a lane permute of two loads.
struct Avx2Max {
    using F = __m256;
    using I = __m256i;
    using M = __m256;
    static constexpr int64_t kLanes = 8;
    static F load(const float* p, int64_t n) { return _mm256_maskload_ps(p, first_lanes(n)); }
    static F even(const float* p, int64_t n) {
        const int64_t need = 2 * n - 1;
        // (lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6) -> lo0 lo2 lo4 lo6 hi0 hi2 hi4 hi6
        const __m256 mixed = _mm256_shuffle_ps(load(p, need), load(p + 8, need - 8),
                                               _MM_SHUFFLE(2, 0, 2, 0));
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(mixed),
                                                      _MM_SHUFFLE(3, 1, 2, 0)));
    }
    static I indices(int64_t at, int64_t step) {
        return _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(at)),
                                _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                   _mm256_set1_epi32(static_cast<int32_t>(step))));
    }
    // take_max's rule: v where v > best or v is NaN
    static M take(F v, F best) {
        return _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    static F select(M m, F v, F best) { return _mm256_blendv_ps(best, v, m); }
    static I select_index(M m, I v, I best) {
        return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best),
                                                    _mm256_castsi256_ps(v), m));
    }
    static void store(float* p, int64_t n, F v) { _mm256_maskstore_ps(p, first_lanes(n), v); }
    static void store_index(int32_t* p, int64_t n, I v) {
        _mm256_maskstore_epi32(p, first_lanes(n), v);
    }
};

}  // namespace

void pool_max_forward_avx2(const float* x, const Pool2dGeometry& g, float* out,
                           int32_t* argmax) {
    max_forward_by(x, g, out, argmax, max_cells_vec<Avx2Max>);
}

void pool_max_values_avx2(const float* x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                          int64_t ow, int64_t kw, int64_t sw, const PoolTaps* rows,
                          const PoolTaps* cols, float* out) {
    max_values_by(x, planes, h, w, oh, ow, kw, sw, rows, cols, out, max_row_vec<Avx2Max>);
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
