// Clamp y = min(max(x, lo), hi) (ReLU: lo 0, hi +inf; ReLU6: 0, 6) and its gradient from
// the output, gx = g where lo < y < hi, 0 elsewhere: the backward needs no mask of its own
// and keeps nothing alive that the next layer does not keep (its input). NaN passes through
// the forward and gets no gradient. float32, contiguous; plain loops the compiler vectorises
// (clamp_impl.h, built generic, AVX2 and AVX-512), OpenMP over blocks of values.
// Numpy twin: framework/ops/elementwise.py, clamp_ref.
#pragma once

#include <cstdint>

namespace tianyuan {

void clamp_forward(const float* x, int64_t n, float lo, float hi, float* y);
void clamp_backward(const float* g, const float* y, int64_t n, float lo, float hi, float* gx);
// y = clamp(a + b, lo, hi): a residual add with its ReLU (the gradient: clamp_backward's).
void add_clamp(const float* a, const float* b, int64_t n, float lo, float hi, float* y);
// gx = g where mask (bytes, 0 or not), 0 elsewhere: a straight-through estimator's gradient
// (fake quantization's, with the mask its forward kept).
void masked_grad(const float* g, const uint8_t* mask, int64_t n, float* gx);
// min and max of x (n >= 1), NaN if any value is: an observer's statistics in one pass.
void min_max(const float* x, int64_t n, float* lo, float* hi);
// min_max of each row of x (rows, cols), cols >= 1, into lo, hi (rows,): a weight observer's
// per-channel statistics in one call.
void min_max_rows(const float* x, int64_t rows, int64_t cols, float* lo, float* hi);

#define TY_CLAMP_ISA(isa)                                                                   \
    void clamp_forward_##isa(const float* x, int64_t n, float lo, float hi, float* y);     \
    void clamp_backward_##isa(const float* g, const float* y, int64_t n, float lo, float hi, \
                              float* gx);                                                    \
    void add_clamp_##isa(const float* a, const float* b, int64_t n, float lo, float hi,      \
                         float* y);                                                          \
    void masked_grad_##isa(const float* g, const uint8_t* mask, int64_t n, float* gx);      \
    void min_max_##isa(const float* x, int64_t n, float* lo, float* hi);                    \
    void min_max_rows_##isa(const float* x, int64_t rows, int64_t cols, float* lo, float* hi);
TY_CLAMP_ISA(avx2)
TY_CLAMP_ISA(avx512)
#undef TY_CLAMP_ISA

}  // namespace tianyuan
