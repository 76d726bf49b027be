// The transposed convolution's col2im add (int8_deconv.h) on AVX2: 8 lanes a step.
#include <immintrin.h>

#include "int8_deconv/int8_deconv.h"

namespace tianyuan {
namespace int8 {

void add_taps_avx2(int32_t* acc, const int32_t* c, const int32_t* fix, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i d = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i*)(c + i)),
                                           _mm256_loadu_si256((const __m256i*)(fix + i)));
        __m256i* a = (__m256i*)(acc + i);
        _mm256_storeu_si256(a, _mm256_add_epi32(_mm256_loadu_si256(a), d));
    }
    for (; i < n; ++i) {
        acc[i] = static_cast<int32_t>(static_cast<uint32_t>(acc[i]) + static_cast<uint32_t>(c[i]) -
                                      static_cast<uint32_t>(fix[i]));
    }
}

}  // namespace int8
}  // namespace tianyuan
