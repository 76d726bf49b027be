// Max pooling kernels; see pool.h. One (n, c) plane per OpenMP work item.
#include "pool.h"

namespace tianyuan {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // output elements below which we stay serial

template <typename T>
void pool_plane(const T* src, const Pool2dGeometry& g, T* dst, int32_t* arg) {
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
        const int64_t y0 = oy * g.sh - g.ph;
        for (int64_t ox = 0; ox < g.out_w; ++ox) {
            const int64_t x0 = ox * g.sw - g.pw;
            T best = T(0);
            int64_t best_index = -1;
            for (int64_t i = 0; i < g.kh; ++i) {
                const int64_t y = y0 + i * g.dh;
                if (y < 0 || y >= g.h) continue;
                for (int64_t j = 0; j < g.kw; ++j) {
                    const int64_t x = x0 + j * g.dw;
                    if (x < 0 || x >= g.w) continue;
                    const T v = src[y * g.w + x];
                    // v != v: NaN propagates, as in PyTorch
                    if (best_index < 0 || v > best || (v != v && best == best)) {
                        best = v;
                        best_index = y * g.w + x;
                    }
                }
            }
            dst[oy * g.out_w + ox] = best;
            arg[oy * g.out_w + ox] = static_cast<int32_t>(best_index);
        }
    }
}

}  // namespace

template <typename T>
void max_pool2d_forward(const T* x, const Pool2dGeometry& g, T* out, int32_t* argmax) {
    const int64_t planes = g.n * g.c, in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
    const bool parallel = planes * out_plane >= kParallelMin;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t p = 0; p < planes; ++p) {
        pool_plane(x + p * in_plane, g, out + p * out_plane, argmax + p * out_plane);
    }
}

template <typename T>
void max_pool2d_backward(const T* grad, const int32_t* argmax, const Pool2dGeometry& g, T* gx) {
    const int64_t planes = g.n * g.c, in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
    const bool parallel = planes * out_plane >= kParallelMin;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t p = 0; p < planes; ++p) {
        T* dst = gx + p * in_plane;
        for (int64_t k = 0; k < in_plane; ++k) dst[k] = T(0);
        const T* gp = grad + p * out_plane;
        const int32_t* ap = argmax + p * out_plane;
        for (int64_t k = 0; k < out_plane; ++k) {
            if (ap[k] >= 0) dst[ap[k]] += gp[k];
        }
    }
}

template void max_pool2d_forward<float>(const float*, const Pool2dGeometry&, float*, int32_t*);
template void max_pool2d_forward<double>(const double*, const Pool2dGeometry&, double*, int32_t*);
template void max_pool2d_backward<float>(const float*, const int32_t*, const Pool2dGeometry&,
                                         float*);
template void max_pool2d_backward<double>(const double*, const int32_t*, const Pool2dGeometry&,
                                          double*);

}  // namespace tianyuan
