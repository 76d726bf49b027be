// Batch norm over (N, C, S) with S = H*W (or 1 for (N, C) input), plain loops the compiler
// vectorises (drivers: batch_norm_impl.h, built generic, AVX2 and AVX-512), OpenMP over
// channels for the reductions and over (n, c) planes for the affine pass. Accumulation in
// double so long channels (N*S up to millions) keep float32 accuracy. Numpy twin: the
// composed batch_norm in framework/functional/normalization.py.
#pragma once

#include <cstdint>

namespace tianyuan {

struct BnShape {
    int64_t n, c, s;  // batch, channels, pixels per plane
};

// mean (C,), biased variance (C,) of x (N, C, S): one pass over each channel (sum and sum of
// squares in double).
template <typename T>
void batch_norm_stats(const T* x, const BnShape& b, T* mean, T* var);

// y = x * scale[c] + shift[c] (the normalisation folded into one multiply-add per value).
template <typename T>
void batch_norm_affine(const T* x, const T* scale, const T* shift, const BnShape& b, T* y);

// Training-mode gradient, with xhat = (x - mean) * invstd and M = N*S per channel:
//   gbias = sum gy, gweight = sum gy * xhat,
//   gx = weight * invstd * (gy - gbias / M - xhat * gweight / M).
// weight may be nullptr (1); gx may be nullptr (only the parameter gradients).
template <typename T>
void batch_norm_backward(const T* gy, const T* x, const T* mean, const T* invstd, const T* weight,
                         const BnShape& b, T* gx, T* gweight, T* gbias);

// float32 builds of the drivers with the ISA's flags (batch_norm_avx2.cpp, _avx512.cpp).
#define TY_BN_ISA(isa)                                                                       \
    void batch_norm_stats_##isa(const float* x, const BnShape& b, float* mean, float* var);  \
    void batch_norm_affine_##isa(const float* x, const float* scale, const float* shift,     \
                                 const BnShape& b, float* y);                                \
    void batch_norm_backward_##isa(const float* gy, const float* x, const float* mean,       \
                                   const float* invstd, const float* weight,                 \
                                   const BnShape& b, float* gx, float* gweight, float* gbias);
TY_BN_ISA(avx2)
TY_BN_ISA(avx512)
#undef TY_BN_ISA

}  // namespace tianyuan
