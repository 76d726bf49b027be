// 3-channel images into channels-last with AVX-512 VBMI byte permutes (to_channels_last,
// int8_channels_last.cpp): 64 pixels at a time, the 3 planes' 64 bytes into 192 interleaved
// ones, each 64-byte third by one two-plane permute and one masked permute of the third plane.
// A channels-last int8 model's first conv reads its NCHW image through this copy.
#include <immintrin.h>

#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {
namespace {

// constexpr: a constant, not code run at load (an ISA unit's initializer is AVX-512 code,
// which a CPU without it could not run at import).
struct Interleave3 {
    alignas(64) uint8_t ab[3][64] = {};  // byte g of third k: a[i] (i) or b[i] (64 + i), i = g/3
    alignas(64) uint8_t c[3][64] = {};   // c[i] where g % 3 == 2
    __mmask64 from_c[3] = {};
    constexpr Interleave3() {
        for (int k = 0; k < 3; ++k) {
            from_c[k] = 0;
            for (int o = 0; o < 64; ++o) {
                const int g = 64 * k + o, i = g / 3, j = g % 3;
                ab[k][o] = static_cast<uint8_t>(j == 1 ? 64 + i : i);
                c[k][o] = static_cast<uint8_t>(i);
                if (j == 2) from_c[k] |= __mmask64{1} << o;
            }
        }
    }
};
constexpr Interleave3 interleave3{};

}  // namespace

void channels_last3_vbmi(const uint8_t* x, int64_t plane, int64_t len, uint8_t* out) {
    for (int64_t p = 0; p < len; p += 64) {
        const int64_t left = len - p < 64 ? len - p : 64;
        const __mmask64 in = low_mask64(left);
        const __m512i a = _mm512_maskz_loadu_epi8(in, x + p);
        const __m512i b = _mm512_maskz_loadu_epi8(in, x + plane + p);
        const __m512i c = _mm512_maskz_loadu_epi8(in, x + 2 * plane + p);
        for (int k = 0; k < 3; ++k) {
            const int64_t bytes = 3 * left - 64 * k;
            if (bytes <= 0) break;
            __m512i v = _mm512_permutex2var_epi8(
                a, _mm512_load_si512(interleave3.ab[k]), b);
            v = _mm512_mask_permutexvar_epi8(v, interleave3.from_c[k],
                                             _mm512_load_si512(interleave3.c[k]), c);
            _mm512_mask_storeu_epi8(out + 3 * p + 64 * k, low_mask64(bytes), v);
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
