// The channels-last pools (int8_ops.h) on AVX-512: max pooling 64 channels a step, the
// window's taps into one register (GCC had vectorized the generic loop, int8_channels_last.cpp,
// in 32-byte steps with a runtime alias check a tap); global average pooling from
// int8_channels_last_pool.h. Whole 64-channel steps load unmasked: masked loads of an input
// out of L2 are slower, and prefetching the rows ahead as well gained nothing
// (bench/RESULTS.md, int8 kernels: other int8 ops).
#include <immintrin.h>

#include "int8_eltwise/int8_channels_last_pool.h"

namespace tianyuan {
namespace int8 {
namespace {

template <bool Signed>
void max_pool(const uint8_t* x, const PoolGeom& g, int64_t c, uint8_t* out) {
    const __m512i lowest = _mm512_set1_epi8(Signed ? -128 : 0);
#pragma omp parallel for schedule(static) if (g.planes * g.oh * g.ow * c > (1 << 16))
    for (int64_t r = 0; r < g.planes * g.oh; ++r) {
        const int64_t n = r / g.oh, oy = r % g.oh;
        const int64_t y0 = oy * g.sh - g.pt, ky0 = y0 < 0 ? -y0 : 0;
        const int64_t ky1 = y0 + g.kh > g.h ? g.h - y0 : g.kh;
        for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t x0 = ox * g.sw - g.pl, kx0 = x0 < 0 ? -x0 : 0;
            const int64_t kx1 = x0 + g.kw > g.w ? g.w - x0 : g.kw;
            uint8_t* o = out + (r * g.ow + ox) * c;
            for (int64_t ch = 0; ch < c; ch += 64) {
                const __mmask64 k = low_mask64(c - ch);
                const bool whole = c - ch >= 64;
                __m512i v = lowest;
                for (int64_t ky = ky0; ky < ky1; ++ky) {
                    const uint8_t* row = x + ((n * g.h + y0 + ky) * g.w + x0) * c + ch;
                    for (int64_t kx = kx0; kx < kx1; ++kx) {
                        const __m512i p = whole ? _mm512_loadu_si512(row + kx * c)
                                                : _mm512_maskz_loadu_epi8(k, row + kx * c);
                        v = Signed ? _mm512_max_epi8(v, p) : _mm512_max_epu8(v, p);
                    }
                }
                _mm512_mask_storeu_epi8(o + ch, k, v);
            }
        }
    }
}

}  // namespace

void max_pool2d_nhwc_avx512(const QIn& x, const PoolGeom& g, int64_t c, uint8_t* out) {
    if (x.is_signed) return max_pool<true>(x.data, g, c, out);
    max_pool<false>(x.data, g, c, out);
}

void avg_pool_global_nhwc_avx512(const QIn& x, int64_t n, int64_t hw, int64_t c, int32_t* sums,
                                 uint8_t* out) {
    avg_global_nhwc_any(x, n, hw, c, sums, out);
}

}  // namespace int8
}  // namespace tianyuan
