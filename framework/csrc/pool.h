// 2-D max pooling (NCHW) with argmax, generic C++, OpenMP over batch x channel planes.
// Numpy twin: framework/ops/pool_ref.py (max_pool2d_ref, max_pool2d_backward_ref).
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

// gx (N, C, H, W), fully overwritten: each output gradient added at its argmax.
template <typename T>
void max_pool2d_backward(const T* grad, const int32_t* argmax, const Pool2dGeometry& g, T* gx);

}  // namespace tianyuan
