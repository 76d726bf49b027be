// The depthwise drivers shared by every ISA translation unit, templated on the row kernels
// (`Rows`): each TU includes this inside its own anonymous namespace use, so nothing here is
// merged across TUs compiled with different flags. Plain loops only (no STL).
//
// Rows provides, for n elements:
//   axpy(y, x, a, n, sx)       y[k] += a * x[k * sx]        (forward: one kernel tap of a row)
//   scatter(y, x, a, n, sy)    y[k * sy] += a * x[k]        (input gradient)
//   dot(a, x, n, sx)           sum_k a[k] * x[k * sx]       (weight gradient)
#pragma once

#include <cstdint>

#include "im2col/im2col.h"

namespace tianyuan {
namespace {

// Output columns [lo, hi) whose input column ox * s + off lies inside [0, size).
struct TapRange {
    int64_t lo, hi;
};

inline TapRange tap_range(int64_t off, int64_t s, int64_t size, int64_t out) {
    int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t hi = size - 1 - off < 0 ? 0 : (size - 1 - off) / s + 1;
    if (hi > out) hi = out;
    if (lo > hi) lo = hi;
    return {lo, hi};
}

// Below this many output elements a parallel region costs more than it saves.
constexpr int64_t kDwParallelMin = 1 << 14;

template <typename T, typename Rows>
void dw_forward_plane(const T* x, const T* w, T b, const Conv2dGeometry& g, T* out) {
    const int64_t oh = g.out_h(), ow = g.out_w();
    for (int64_t oy = 0; oy < oh; ++oy) {
        T* orow = out + oy * ow;
        for (int64_t ox = 0; ox < ow; ++ox) orow[ox] = b;
        for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t iy = oy * g.sh - g.pt + i * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t off = j * g.dw - g.pl;
                const TapRange r = tap_range(off, g.sw, g.w, ow);
                if (r.lo >= r.hi) continue;
                const T* src = x + iy * g.w + (r.lo * g.sw + off);
                Rows::axpy(orow + r.lo, src, w[i * g.kw + j], r.hi - r.lo, g.sw);
            }
        }
    }
}

template <typename T, typename Rows>
void dw_backward_input_plane(const T* gy, const T* w, const Conv2dGeometry& g, T* gx) {
    const int64_t oh = g.out_h(), ow = g.out_w();
    for (int64_t k = 0; k < g.h * g.w; ++k) gx[k] = T(0);
    for (int64_t oy = 0; oy < oh; ++oy) {
        const T* grow = gy + oy * ow;
        for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t iy = oy * g.sh - g.pt + i * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t off = j * g.dw - g.pl;
                const TapRange r = tap_range(off, g.sw, g.w, ow);
                if (r.lo >= r.hi) continue;
                T* dst = gx + iy * g.w + (r.lo * g.sw + off);
                Rows::scatter(dst, grow + r.lo, w[i * g.kw + j], r.hi - r.lo, g.sw);
            }
        }
    }
}

// Adds one plane's contribution to gw (kh, kw).
template <typename T, typename Rows>
void dw_backward_weight_plane(const T* x, const T* gy, const Conv2dGeometry& g, T* gw) {
    const int64_t oh = g.out_h(), ow = g.out_w();
    for (int64_t i = 0; i < g.kh; ++i) {
        for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t off = j * g.dw - g.pl;
            const TapRange r = tap_range(off, g.sw, g.w, ow);
            T acc = T(0);
            for (int64_t oy = 0; oy < oh && r.lo < r.hi; ++oy) {
                const int64_t iy = oy * g.sh - g.pt + i * g.dh;
                if (iy < 0 || iy >= g.h) continue;
                const T* src = x + iy * g.w + (r.lo * g.sw + off);
                acc += Rows::dot(gy + oy * ow + r.lo, src, r.hi - r.lo, g.sw);
            }
            gw[i * g.kw + j] += acc;
        }
    }
}

template <typename T, typename Rows>
void dw_forward(const T* x, const T* w, const T* bias, const Conv2dGeometry& g, T* out) {
    const int64_t in_plane = g.h * g.w, out_plane = g.out_h() * g.out_w(), k = g.kh * g.kw;
    const bool parallel = g.n * g.c * out_plane * k >= kDwParallelMin;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t c = 0; c < g.c; ++c) {
            const int64_t p = n * g.c + c;
            dw_forward_plane<T, Rows>(x + p * in_plane, w + c * k, bias ? bias[c] : T(0), g,
                                      out + p * out_plane);
        }
    }
}

template <typename T, typename Rows>
void dw_backward_input(const T* gy, const T* w, const Conv2dGeometry& g, T* gx) {
    const int64_t in_plane = g.h * g.w, out_plane = g.out_h() * g.out_w(), k = g.kh * g.kw;
    const bool parallel = g.n * g.c * out_plane * k >= kDwParallelMin;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t c = 0; c < g.c; ++c) {
            const int64_t p = n * g.c + c;
            dw_backward_input_plane<T, Rows>(gy + p * out_plane, w + c * k, g, gx + p * in_plane);
        }
    }
}

// One channel per work item, batch summed inside it: no races on gw.
template <typename T, typename Rows>
void dw_backward_weight(const T* x, const T* gy, const Conv2dGeometry& g, T* gw) {
    const int64_t in_plane = g.h * g.w, out_plane = g.out_h() * g.out_w(), k = g.kh * g.kw;
    const bool parallel = g.n * g.c * out_plane * k >= kDwParallelMin;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t c = 0; c < g.c; ++c) {
        T* gwc = gw + c * k;
        for (int64_t t = 0; t < k; ++t) gwc[t] = T(0);
        for (int64_t n = 0; n < g.n; ++n) {
            const int64_t p = n * g.c + c;
            dw_backward_weight_plane<T, Rows>(x + p * in_plane, gy + p * out_plane, g, gwc);
        }
    }
}

}  // namespace
}  // namespace tianyuan
