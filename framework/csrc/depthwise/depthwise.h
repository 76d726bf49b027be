// Depthwise 2-D convolution (groups == C == Co, one kernel per channel), direct: no im2col,
// no GEMM. out[n, c, oy, ox] = bias[c] + sum_ij w[c, i, j] * x[n, c, oy*sh - pt + i*dh,
// ox*sw - pl + j*dw] (0 outside the image). Geometry as in im2col.h (asymmetric padding,
// dilation, any stride). Each (n, c) plane is one OpenMP work item (weight gradient: each
// channel; AVX2's lanes kernels: each image and block of 8 channels, or each block). float32 runs
// the AVX-512 / AVX2 row kernels (depthwise_avx512.cpp, depthwise_avx2.cpp) when the ISA
// allows; float64 (gradient checks) and generic run plain loops. Numpy twins:
// framework/ops/conv_ref.py (depthwise_*_ref).
#pragma once

#include <cstdint>

#include "im2col/im2col.h"

namespace tianyuan {

// x (N, C, H, W), w (C, kh, kw), bias (C,) or nullptr -> out (N, C, out_h, out_w).
template <typename T>
void depthwise_conv2d_forward(const T* x, const T* w, const T* bias, const Conv2dGeometry& g,
                              T* out);

// gy (N, C, out_h, out_w), w (C, kh, kw) -> gx (N, C, H, W), fully overwritten.
template <typename T>
void depthwise_conv2d_backward_input(const T* gy, const T* w, const Conv2dGeometry& g, T* gx);

// x (N, C, H, W), gy (N, C, out_h, out_w) -> gw (C, kh, kw), fully overwritten.
template <typename T>
void depthwise_conv2d_backward_weight(const T* x, const T* gy, const Conv2dGeometry& g, T* gw);

// The ISA translation units: same contract, float32 only.
void depthwise_forward_avx512(const float* x, const float* w, const float* bias,
                              const Conv2dGeometry& g, float* out);
void depthwise_backward_input_avx512(const float* gy, const float* w, const Conv2dGeometry& g,
                                     float* gx);
void depthwise_backward_weight_avx512(const float* x, const float* gy, const Conv2dGeometry& g,
                                      float* gw);
// AVX2's forward with the channels in the lanes (depthwise_lanes_avx2.cpp): false, doing
// nothing, where it does not pay (fewer than 8 channels, fewer (image, block of 8) pairs than
// threads, stride 1 on maps past 28x28, kernels past 25 taps).
bool depthwise_lanes_forward_avx2(const float* x, const float* w, const float* bias,
                                  const Conv2dGeometry& g, float* out);
// Its input gradient at stride 2 or more, each input position summing the taps that reach it
// (stride 1 is the forward of gy with the kernel flipped); the forward's rule.
bool depthwise_lanes_backward_input_avx2(const float* gy, const float* w,
                                         const Conv2dGeometry& g, float* gx);
// Its weight gradient: a block's sums over the images in order (the same bits on any number of
// threads); taken with 8 channels or more and kernels up to 25 taps, whatever the threads.
bool depthwise_lanes_backward_weight_avx2(const float* x, const float* gy,
                                          const Conv2dGeometry& g, float* gw);
// The flat-plan kernels (depthwise_flat_avx512.cpp): false, doing nothing, for shapes they
// do not take.
bool depthwise_flat_forward_avx512(const float* x, const float* w, const float* bias,
                                   const Conv2dGeometry& g, float* out);
bool depthwise_flat_backward_input_avx512(const float* gy, const float* w,
                                          const Conv2dGeometry& g, float* gx);
bool depthwise_flat_backward_weight_avx512(const float* x, const float* gy,
                                           const Conv2dGeometry& g, float* gw);
void depthwise_forward_avx2(const float* x, const float* w, const float* bias,
                            const Conv2dGeometry& g, float* out);
void depthwise_backward_input_avx2(const float* gy, const float* w, const Conv2dGeometry& g,
                                   float* gx);
void depthwise_backward_weight_avx2(const float* x, const float* gy, const Conv2dGeometry& g,
                                    float* gw);

}  // namespace tianyuan
