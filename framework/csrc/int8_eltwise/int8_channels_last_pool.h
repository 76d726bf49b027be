// Global average pooling on channels-last int8 activations (int8_ops.h:
// avg_pool_global_nhwc): a loop over a pixel's C contiguous bytes, which the compiler
// vectorizes with whatever the including unit's flags allow (int8_channels_last.cpp, generic;
// int8_channels_last_avx512.cpp). Everything is static (no COMDAT the linker could pick for a
// unit built with other flags).
#pragma once

#include <omp.h>

#include <cstdint>

#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {
namespace {

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
