// Max pooling kernels; see pool.h. One (n, c) plane per OpenMP work item.
#include "pool.h"

namespace tianyuan {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // output elements below which we stay serial

// ceil(a / b) for b > 0 and any sign of a.
inline int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// Kernel taps [lo, hi) whose pixel start + t * d lies inside [0, size).
inline void taps(int64_t start, int64_t d, int64_t k, int64_t size, int64_t* lo, int64_t* hi) {
    *lo = start < 0 ? ceil_div(-start, d) : 0;
    *hi = ceil_div(size - start, d);
    if (*hi > k) *hi = k;
    if (*hi < *lo) *hi = *lo;
}

template <typename T>
void pool_plane(const T* src, const Pool2dGeometry& g, T* dst, int32_t* arg) {
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
        const int64_t y0 = oy * g.sh - g.ph;
        int64_t i_lo, i_hi;
        taps(y0, g.dh, g.kh, g.h, &i_lo, &i_hi);
        for (int64_t ox = 0; ox < g.out_w; ++ox) {
            const int64_t x0 = ox * g.sw - g.pw;
            int64_t j_lo, j_hi;
            taps(x0, g.dw, g.kw, g.w, &j_lo, &j_hi);
            T best = T(0);
            int64_t best_index = -1;  // stays -1 only for a window outside the image
            if (i_lo < i_hi && j_lo < j_hi) {
                best_index = (y0 + i_lo * g.dh) * g.w + x0 + j_lo * g.dw;
                best = src[best_index];
            }
            for (int64_t i = i_lo; i < i_hi; ++i) {
                const int64_t row = (y0 + i * g.dh) * g.w + x0;
                for (int64_t j = j_lo; j < j_hi; ++j) {
                    const T v = src[row + j * g.dw];
                    const bool take = v > best || v != v;  // NaN propagates, as in PyTorch
                    best = take ? v : best;                // selects, not branches: random
                    best_index = take ? row + j * g.dw : best_index;  // data mispredicts
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
