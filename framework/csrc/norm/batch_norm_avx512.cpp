// Batch-norm drivers (batch_norm_impl.h), float32, compiled with the avx512 flags.
#include <cstdint>

#include "norm/batch_norm.h"
#include "norm/batch_norm_impl.h"

namespace tianyuan {

void batch_norm_stats_avx512(const float* x, const BnShape& b, float* mean, float* var,
                             float* xmin, float* xmax) {
    bn_stats(x, b, mean, var, xmin, xmax);
}

void batch_norm_affine_avx512(const float* x, const float* scale, const float* shift,
                              const BnShape& b, float* y, const BnClamp<float>* act,
                              const BnFakeQuant* fq) {
    bn_affine(x, scale, shift, b, y, act, fq);
}

void batch_norm_backward_avx512(const float* gy, const float* x, const float* mean,
                                const float* invstd, const float* weight, const BnShape& b,
                                float* gx, float* gweight, float* gbias,
                                const BnClamp<float>* act, const uint8_t* pass) {
    bn_backward(gy, x, mean, invstd, weight, b, gx, gweight, gbias, act, pass);
}

}  // namespace tianyuan
