// Pooling on channels-last int8 activations (int8_ops.h: max_pool2d_nhwc,
// avg_pool_global_nhwc): loops over a pixel's C contiguous bytes, which the compiler
// vectorizes with whatever the including unit's flags allow (int8_channels_last.cpp, generic;
// int8_channels_last_avx512.cpp: 64 bytes a step). Everything is static (no COMDAT the linker
// could pick for a unit built with other flags).
#pragma once

#include <omp.h>

#include <cstdint>

#include "int8_ops.h"

namespace tianyuan {
namespace int8 {
namespace {

template <class T>
void max_pool_nhwc(const T* x, const PoolGeom& g, int64_t c, T lowest, T* out) {
#pragma omp parallel for schedule(static) if (g.planes * g.oh * g.ow * c > (1 << 16))
    for (int64_t r = 0; r < g.planes * g.oh; ++r) {
        const int64_t n = r / g.oh, oy = r % g.oh;
        for (int64_t ox = 0; ox < g.ow; ++ox) {
            T* o = out + (r * g.ow + ox) * c;
            for (int64_t ch = 0; ch < c; ++ch) o[ch] = lowest;
            for (int64_t ky = 0; ky < g.kh; ++ky) {
                const int64_t iy = oy * g.sh - g.pt + ky;
                if (iy < 0 || iy >= g.h) continue;
                for (int64_t kx = 0; kx < g.kw; ++kx) {
                    const int64_t ix = ox * g.sw - g.pl + kx;
                    if (ix < 0 || ix >= g.w) continue;
                    const T* p = x + ((n * g.h + iy) * g.w + ix) * c;
                    for (int64_t ch = 0; ch < c; ++ch) o[ch] = p[ch] > o[ch] ? p[ch] : o[ch];
                }
            }
        }
    }
}

static inline void max_pool_nhwc_any(const QIn& x, const PoolGeom& g, int64_t c, uint8_t* out) {
    if (x.is_signed) {
        max_pool_nhwc(reinterpret_cast<const int8_t*>(x.data), g, c, int8_t{-128},
                      reinterpret_cast<int8_t*>(out));
    } else {
        max_pool_nhwc(x.data, g, c, uint8_t{0}, out);
    }
}

// reference.avg_pool2d over each image's hw pixels: zp + floor((2 sum(x - zp) + hw) / (2 hw));
// sums: n * c words of scratch.
template <class T>
void avg_global_nhwc(const T* x, int64_t n, int64_t hw, int64_t c, int32_t zp, int32_t* sums,
                     T* out) {
#pragma omp parallel for schedule(static) if (n * hw * c > (1 << 16))
    for (int64_t img = 0; img < n; ++img) {
        int32_t* s = sums + img * c;
        for (int64_t ch = 0; ch < c; ++ch) s[ch] = 0;
        const T* p = x + img * hw * c;
        for (int64_t i = 0; i < hw; ++i) {
            for (int64_t ch = 0; ch < c; ++ch) s[ch] += p[i * c + ch];
        }
        const int64_t den = 2 * hw;
        for (int64_t ch = 0; ch < c; ++ch) {
            const int64_t num = 2 * (static_cast<int64_t>(s[ch]) - hw * zp) + hw;
            const int64_t q = num >= 0 ? num / den : -((-num + den - 1) / den);  // floor
            out[img * c + ch] = static_cast<T>(q + zp);
        }
    }
}

static inline void avg_global_nhwc_any(const QIn& x, int64_t n, int64_t hw, int64_t c,
                                       int32_t* sums, uint8_t* out) {
    if (x.is_signed) {
        avg_global_nhwc(reinterpret_cast<const int8_t*>(x.data), n, hw, c, x.zero_point, sums,
                        reinterpret_cast<int8_t*>(out));
    } else {
        avg_global_nhwc(x.data, n, hw, c, x.zero_point, sums, out);
    }
}

}  // namespace
}  // namespace int8
}  // namespace tianyuan
