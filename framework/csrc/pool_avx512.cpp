// Pooling drivers (pool_impl.h), float32, compiled with the avx512 flags.
#include <cstdint>

#include "pool.h"
#include "pool_impl.h"

namespace tianyuan {

void pool_max_forward_avx512(const float* x, const Pool2dGeometry& g, float* out,
                           int32_t* argmax) {
    max_forward(x, g, out, argmax);
}

void pool_max_backward_avx512(const float* grad, const int32_t* argmax, const Pool2dGeometry& g,
                            float* gx) {
    max_backward(grad, argmax, g, gx);
}

void pool_max_values_avx512(const float* x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                          int64_t ow, int64_t kw, int64_t sw, const PoolTaps* rows,
                          const PoolTaps* cols, float* out) {
    max_values(x, planes, h, w, oh, ow, kw, sw, rows, cols, out);
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
