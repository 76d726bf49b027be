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
// squares in double); with xmin and xmax (C,), each channel's extremes too (NaN where the
// channel has a NaN), in the same pass.
template <typename T>
void batch_norm_stats(const T* x, const BnShape& b, T* mean, T* var, T* xmin = nullptr,
                      T* xmax = nullptr);

// The activation fused after a batch norm in training, a clamp to [lo, hi] (ReLU: 0, +inf;
// ReLU6: 0, 6) as clamp.h's: the affine pass clamps what it writes, and the backward takes gy
// only where lo < v < hi, v = x * scale[c] + shift[c] being the value the clamp saw, worked
// out again the same way (not read back from the output: one stream fewer in each backward
// pass) - the same bits as the batch norm, the clamp and their gradients run one after the
// other, in two passes fewer.
template <typename T>
struct BnClamp {
    T lo, hi;
    const T* scale;  // the forward's affine (C,), for the backward's mask; unused by the
    const T* shift;  // forward, which takes them as arguments
};

// A fake quantization after the batch norm (and its clamp), per tensor, with fake_quantize's
// steps (int8_ops.h): r = round half to even of v / scale, y = clamp(r, lo, hi) * scale and
// inside = lo <= r <= hi (lo, hi: the integer range less the zero point). The affine pass
// writes y and inside in place of v: two passes fewer (QAT's activation fake quantization,
// whose range the observer takes from the channels' extremes, batch_norm_stats').
struct BnFakeQuant {
    float scale, lo, hi;
    uint8_t* inside;  // x's shape
};

// y = x * scale[c] + shift[c] (the normalisation folded into one multiply-add per value),
// clamped where act is given, fake-quantized where fq is.
template <typename T>
void batch_norm_affine(const T* x, const T* scale, const T* shift, const BnShape& b, T* y,
                       const BnClamp<T>* act = nullptr, const BnFakeQuant* fq = nullptr);

// Training-mode gradient, with xhat = (x - mean) * invstd and M = N*S per channel:
//   gbias = sum gy, gweight = sum gy * xhat,
//   gx = weight * invstd * (gy - gbias / M - xhat * gweight / M).
// weight may be nullptr (1); gx may be nullptr (only the parameter gradients); with act, gy
// is 0 where the clamp's input lay on or past its bounds; with pass (bytes of x's shape), 0
// where pass is 0: a straight-through estimator after the batch norm (and its clamp), such as
// QAT's activation fake quantization, whose own backward pass this saves.
template <typename T>
void batch_norm_backward(const T* gy, const T* x, const T* mean, const T* invstd, const T* weight,
                         const BnShape& b, T* gx, T* gweight, T* gbias,
                         const BnClamp<T>* act = nullptr, const uint8_t* pass = nullptr);

// float32 builds of the drivers with the ISA's flags (batch_norm_avx2.cpp, _avx512.cpp).
#define TY_BN_ISA(isa)                                                                       \
    void batch_norm_stats_##isa(const float* x, const BnShape& b, float* mean, float* var,   \
                                float* xmin, float* xmax);                                  \
    void batch_norm_affine_##isa(const float* x, const float* scale, const float* shift,     \
                                 const BnShape& b, float* y, const BnClamp<float>* act,      \
                                 const BnFakeQuant* fq);                                     \
    void batch_norm_backward_##isa(const float* gy, const float* x, const float* mean,       \
                                   const float* invstd, const float* weight,                 \
                                   const BnShape& b, float* gx, float* gweight, float* gbias, \
                                   const BnClamp<float>* act, const uint8_t* pass);
TY_BN_ISA(avx2)
TY_BN_ISA(avx512)
#undef TY_BN_ISA

}  // namespace tianyuan
