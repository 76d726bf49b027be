// Batch-norm kernels; see batch_norm.h. The drivers live in batch_norm_impl.h; this file
// compiles them generically (float64, and float32 below AVX2) and dispatches float32 to the
// AVX2 / AVX-512 builds of the same drivers.
#include "norm/batch_norm.h"

#include "norm/batch_norm_impl.h"
#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace {

// float32's kernels for the ISA in use (the family's one ISA decision: fill_batch_norm)
struct BatchNormKernels {
    void (*stats)(const float*, const BnShape&, float*, float*, float*, float*);
    void (*affine)(const float*, const float*, const float*, const BnShape&, float*,
                   const BnClamp<float>*, const BnFakeQuant*);
    void (*backward)(const float*, const float*, const float*, const float*, const float*,
                     const BnShape&, float*, float*, float*, const BnClamp<float>*,
                     const uint8_t*);
};

void fill_batch_norm(BatchNormKernels& k, Isa isa) {
    if (isa >= Isa::avx512) {
        k = {batch_norm_stats_avx512, batch_norm_affine_avx512, batch_norm_backward_avx512};
    } else if (isa >= Isa::avx2) {
        k = {batch_norm_stats_avx2, batch_norm_affine_avx2, batch_norm_backward_avx2};
    } else {
        k = {bn_stats<float>, bn_affine<float>, bn_backward<float>};
    }
}

Dispatch<BatchNormKernels> kernels(fill_batch_norm);

}  // namespace

template <typename T>
void batch_norm_stats(const T* x, const BnShape& b, T* mean, T* var, T* xmin, T* xmax) {
    bn_stats(x, b, mean, var, xmin, xmax);
}

template <>
void batch_norm_stats(const float* x, const BnShape& b, float* mean, float* var, float* xmin,
                      float* xmax) {
    kernels().stats(x, b, mean, var, xmin, xmax);
}

template <typename T>
void batch_norm_affine(const T* x, const T* scale, const T* shift, const BnShape& b, T* y,
                       const BnClamp<T>* act, const BnFakeQuant* fq) {
    bn_affine(x, scale, shift, b, y, act, fq);
}

template <>
void batch_norm_affine(const float* x, const float* scale, const float* shift, const BnShape& b,
                       float* y, const BnClamp<float>* act, const BnFakeQuant* fq) {
    kernels().affine(x, scale, shift, b, y, act, fq);
}

template <typename T>
void batch_norm_backward(const T* gy, const T* x, const T* mean, const T* invstd, const T* weight,
                         const BnShape& b, T* gx, T* gweight, T* gbias, const BnClamp<T>* act,
                         const uint8_t* pass) {
    bn_backward(gy, x, mean, invstd, weight, b, gx, gweight, gbias, act, pass);
}

template <>
void batch_norm_backward(const float* gy, const float* x, const float* mean,
                         const float* invstd, const float* weight, const BnShape& b, float* gx,
                         float* gweight, float* gbias, const BnClamp<float>* act,
                         const uint8_t* pass) {
    kernels().backward(gy, x, mean, invstd, weight, b, gx, gweight, gbias, act, pass);
}

template void batch_norm_stats<double>(const double*, const BnShape&, double*, double*, double*,
                                       double*);
template void batch_norm_affine<double>(const double*, const double*, const double*,
                                        const BnShape&, double*, const BnClamp<double>*,
                                        const BnFakeQuant*);
template void batch_norm_backward<double>(const double*, const double*, const double*,
                                          const double*, const double*, const BnShape&, double*,
                                          double*, double*, const BnClamp<double>*,
                                          const uint8_t*);

}  // namespace tianyuan
