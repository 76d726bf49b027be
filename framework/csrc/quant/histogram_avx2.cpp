// histogram_scalar (histogram.h) 8 values at a time: the bin from the float product, both edges
// gathered, numpy's corrections as lane masks; the counts then one lane at a time. The same bins as
// the scalar run (its tail here; faster than it, the gathers and the counts one lane at a time
// bounding it: bench/RESULTS.md, other int8 ops): a decrement's lane cannot also increment (v <
// e[k] <= e[k + 1]), so testing e[k + 1] of the first k is the scalar's second test.
#include <immintrin.h>

#include <cstdint>

#include "quant/histogram.h"

namespace tianyuan {

void histogram_run_avx2(const float* x, int64_t begin, int64_t end, const HistRun& h,
                        int64_t* row) {
    const float* e = h.edges;
    const __m256 first = _mm256_set1_ps(h.first), last = _mm256_set1_ps(h.last);
    const __m256 per = _mm256_set1_ps(h.per);
    const __m256i top = _mm256_set1_epi32(static_cast<int32_t>(h.bins - 1));
    const __m256i zero = _mm256_setzero_si256();
    alignas(32) int32_t ks[8];
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        // ordered compares: NaN lanes are out
        int in = _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(v, first, _CMP_GE_OQ),
                                                  _mm256_cmp_ps(v, last, _CMP_LE_OQ)));
        if (!in) continue;
        __m256i k = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_sub_ps(v, first), per));
        k = _mm256_min_epi32(_mm256_max_epi32(k, zero), top);  // lanes out: any bin, unread
        const __m256 ek = _mm256_i32gather_ps(e, k, 4), ek1 = _mm256_i32gather_ps(e + 1, k, 4);
        const __m256i down = _mm256_castps_si256(_mm256_cmp_ps(v, ek, _CMP_LT_OQ));
        const __m256i up = _mm256_andnot_si256(
            _mm256_cmpeq_epi32(k, top), _mm256_castps_si256(_mm256_cmp_ps(v, ek1, _CMP_GE_OQ)));
        k = _mm256_sub_epi32(_mm256_add_epi32(k, down), up);  // masks are -1
        _mm256_store_si256(reinterpret_cast<__m256i*>(ks), k);
        for (; in; in &= in - 1) ++row[ks[__builtin_ctz(in)]];
    }
    histogram_scalar(x, i, end, h, row);
}

}  // namespace tianyuan
