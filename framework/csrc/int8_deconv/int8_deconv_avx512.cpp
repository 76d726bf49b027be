// The transposed convolution's col2im add (int8_deconv.h) on AVX-512: 16 lanes a step, the
// tail masked.
#include <immintrin.h>

#include "int8_deconv/int8_deconv.h"

namespace tianyuan {
namespace int8 {

void add_taps_avx512(int32_t* acc, const int32_t* c, const int32_t* fix, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
        const __m512i d = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(m, c + i),
                                           _mm512_maskz_loadu_epi32(m, fix + i));
        _mm512_mask_storeu_epi32(acc + i, m,
                                 _mm512_add_epi32(_mm512_maskz_loadu_epi32(m, acc + i), d));
    }
}

}  // namespace int8
}  // namespace tianyuan
