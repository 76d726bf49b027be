// 2-D pooling (NCHW): max with argmax, average, adaptive average; forward and backward.
// OpenMP over batch x channel planes. Drivers: pool_impl.h, built generic, AVX2 and AVX-512.
// Numpy twins: framework/ops/pool_ref.py (max_pool2d_ref, max_pool2d_backward_ref,
// avg_pool2d_ref, avg_pool2d_backward_ref, adaptive_avg_pool2d_ref, ..._backward_ref).
#pragma once

#include <cstdint>

namespace tianyuan {

struct Pool2dGeometry {
    int64_t n, c, h, w;    // input (N, C, H, W)
    int64_t kh, kw;        // kernel
    int64_t sh, sw;        // stride
    int64_t ph, pw;        // padding (top/left); the bottom/right edge is implied by out_h/out_w
    int64_t dh, dw;        // dilation
    int64_t out_h, out_w;  // output size (already reflects ceil_mode)
};

// out (N, C, out_h, out_w): max over the window's in-image pixels, scanned row by row: the
// first maximum wins, and any NaN replaces the current best (PyTorch's rule, so NaN
// propagates); argmax: its flat index y * W + x within the (H, W) plane.
template <typename T>
void max_pool2d_forward(const T* x, const Pool2dGeometry& g, T* out, int32_t* argmax);

// gx (N, C, H, W), fully overwritten: each output gradient added at its argmax; an argmax
// outside the plane (a caller's bad array) is skipped and counted: the count.
template <typename T>
int64_t max_pool2d_backward(const T* grad, const int32_t* argmax, const Pool2dGeometry& g, T* gx);

// Average pooling (dilation 1): mean over the window's in-image pixels divided by PyTorch's
// count (count_include_pad: the window clipped to the padded input, else to the image; the
// extra ceil_mode edge never counts). Backward spreads each gradient over its window.
template <typename T>
void avg_pool2d_forward(const T* x, const Pool2dGeometry& g, bool count_include_pad, T* out);
template <typename T>
void avg_pool2d_backward(const T* grad, const Pool2dGeometry& g, bool count_include_pad, T* gx);

// Adaptive average pooling to (out_h, out_w): window rows [floor(i H / oh), ceil((i+1) H / oh)),
// columns likewise; kernel, stride, padding and dilation of g are ignored.
template <typename T>
void adaptive_avg_pool2d_forward(const T* x, const Pool2dGeometry& g, T* out);
template <typename T>
void adaptive_avg_pool2d_backward(const T* grad, const Pool2dGeometry& g, T* gx);

// One axis of a mean window: pixels [lo, hi) and the divisor's factor.
struct PoolSpan {
    int64_t lo, hi, count;
};

// Max pooling values without argmax (inference: nothing to route a gradient to), computed
// separably; equal to max_pool2d_forward's out, NaN and first-maximum rules included.
template <typename T>
void max_pool2d_values(const T* x, const Pool2dGeometry& g, T* out);

// One axis of a max window: its first in-image pixel, how many, `step` apart (the dilation).
struct PoolTaps {
    int64_t first, count, step;
};

// float32 builds of the drivers with the ISA's flags (pool_avx2.cpp, pool_avx512.cpp).
#define TY_POOL_ISA(isa)                                                                       \
    void pool_max_forward_##isa(const float* x, const Pool2dGeometry& g, float* out,           \
                                int32_t* argmax);                                              \
    int64_t pool_max_backward_##isa(const float* grad, const int32_t* argmax,                     \
                                 const Pool2dGeometry& g, float* gx);                          \
    void pool_max_values_##isa(const float* x, int64_t planes, int64_t h, int64_t w,           \
                               int64_t oh, int64_t ow, int64_t kw, int64_t sw,                 \
                               const PoolTaps* rows, const PoolTaps* cols, float* out);        \
    void pool_mean_forward_##isa(const float* x, int64_t planes, int64_t h, int64_t w,         \
                                 int64_t oh, int64_t ow, const PoolSpan* rows,                 \
                                 const PoolSpan* cols, float* out);                            \
    void pool_mean_backward_##isa(const float* grad, int64_t planes, int64_t h, int64_t w,     \
                                  int64_t oh, int64_t ow, const PoolSpan* rows,                \
                                  const PoolSpan* cols, float* gx);
TY_POOL_ISA(avx2)
TY_POOL_ISA(avx512)
#undef TY_POOL_ISA

}  // namespace tianyuan
