// AVX2 row kernels for the depthwise drivers (depthwise_impl.h), float32: 8 lanes a step for
// unit stride, scalar tails and scalar strided rows.
#include <immintrin.h>

#include <cstdint>

#include "depthwise.h"
#include "depthwise_impl.h"

namespace tianyuan {
namespace {

struct Avx2Rows {
    static void axpy(float* y, const float* x, float a, int64_t n, int64_t sx) {
        int64_t k = 0;
        if (sx == 1) {
            const __m256 va = _mm256_set1_ps(a);
            for (; k + 8 <= n; k += 8) {
                _mm256_storeu_ps(y + k, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + k),
                                                        _mm256_loadu_ps(y + k)));
            }
        }
        for (; k < n; ++k) y[k] += a * x[k * sx];
    }

    static void scatter(float* y, const float* x, float a, int64_t n, int64_t sy) {
        if (sy == 1) return axpy(y, x, a, n, 1);
        for (int64_t k = 0; k < n; ++k) y[k * sy] += a * x[k];
    }

    static float dot(const float* a, const float* x, int64_t n, int64_t sx) {
        int64_t k = 0;
        float s = 0.0f;
        if (sx == 1 && n >= 8) {
            __m256 acc = _mm256_setzero_ps();
            for (; k + 8 <= n; k += 8) {
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(x + k), acc);
            }
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
            s = _mm_cvtss_f32(h);
        }
        for (; k < n; ++k) s += a[k] * x[k * sx];
        return s;
    }
};

}  // namespace

void depthwise_forward_avx2(const float* x, const float* w, const float* bias,
                            const Conv2dGeometry& g, float* out) {
    dw_forward<float, Avx2Rows>(x, w, bias, g, out);
}

void depthwise_backward_input_avx2(const float* gy, const float* w, const Conv2dGeometry& g,
                                   float* gx) {
    dw_backward_input<float, Avx2Rows>(gy, w, g, gx);
}

void depthwise_backward_weight_avx2(const float* x, const float* gy, const Conv2dGeometry& g,
                                    float* gw) {
    dw_backward_weight<float, Avx2Rows>(x, gy, g, gw);
}

}  // namespace tianyuan
