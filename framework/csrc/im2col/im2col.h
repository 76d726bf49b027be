// im2col / col2im for 2-D convolution (NCHW), OpenMP over batch x channel; drivers in
// im2col_impl.h, built generic, AVX2 and AVX-512.
//
// Column layout (batch folded into the columns, so one GEMM per group covers a batch chunk):
//   cols[(c * kh + i) * kw + j][(n * out_h + oy) * out_w + ox]
//     = x[n][c][oy * sh - pt + i * dh][ox * sw - pl + j * dw]   (0 outside the image)
// i.e. cols has shape (C * kh * kw, N * out_h * out_w). col2im is its adjoint: it sums
// every column entry back into the pixel it came from. Numpy twin: framework/ops/conv_ref.py.
#pragma once

#include <cstdint>

namespace tianyuan {

struct Conv2dGeometry {
    int64_t n, c, h, w;      // input (N, C, H, W)
    int64_t kh, kw;          // kernel
    int64_t sh, sw;          // stride (>= 1)
    int64_t pt, pb, pl, pr;  // padding top, bottom, left, right (>= 0, may be asymmetric)
    int64_t dh, dw;          // dilation (>= 1)

    int64_t out_h() const { return (h + pt + pb - dh * (kh - 1) - 1) / sh + 1; }
    int64_t out_w() const { return (w + pl + pr - dw * (kw - 1) - 1) / sw + 1; }
    int64_t col_rows() const { return c * kh * kw; }
    int64_t col_cols() const { return n * out_h() * out_w(); }
};

// x: (N, C, H, W) contiguous; cols: (C*kh*kw, N*out_h*out_w), fully overwritten.
template <typename T>
void im2col(const T* x, const Conv2dGeometry& g, T* cols);

// cols as above; x: (N, C, H, W), fully overwritten with the summed contributions.
template <typename T>
void col2im(const T* cols, const Conv2dGeometry& g, T* x);

// The kernel of the adjoint convolution (an input gradient as a convolution):
// out[c][o][i][j] = w[o][c][kh - 1 - i][kw - 1 - j]; w (Co, C, kh, kw), out (C, Co, kh, kw),
// both contiguous. OpenMP over blocks of c (numpy's strided copy was slow on large kernels).
template <typename T>
void flip_kernel(const T* w, int64_t co, int64_t c, int64_t kh, int64_t kw, T* out);

// float32 builds of the drivers with the ISA's flags (im2col_avx2.cpp, im2col_avx512.cpp).
void im2col_avx2(const float* x, const Conv2dGeometry& g, float* cols);
void col2im_avx2(const float* cols, const Conv2dGeometry& g, float* x);
void im2col_avx512(const float* x, const Conv2dGeometry& g, float* cols);
void col2im_avx512(const float* cols, const Conv2dGeometry& g, float* x);

}  // namespace tianyuan
