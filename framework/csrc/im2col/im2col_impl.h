// im2col / col2im drivers shared by every ISA translation unit (im2col.cpp, im2col_avx2.cpp,
// im2col_avx512.cpp): each includes this file into its own anonymous namespace and compiles
// it with its own flags; see im2col.h. Each (n, c) plane is one OpenMP work item: im2col
// writes disjoint rows of cols, col2im writes its own plane of x, so neither needs atomics.
#pragma once

#include <cstdint>

#include "im2col/im2col.h"

namespace tianyuan {
namespace {

// ceil(a / b) for b > 0 and any sign of a.
inline int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// Below this many column elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

inline int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Output columns [lo, hi) whose source column ox * sw + offset lies inside [0, w).
inline void valid_range(int64_t offset, int64_t sw, int64_t w, int64_t out_w, int64_t* lo,
                        int64_t* hi) {
    *lo = clamp(ceil_div(-offset, sw), 0, out_w);
    *hi = clamp(ceil_div(w - offset, sw), *lo, out_w);
}

// One kernel offset (i, j) of one plane: dst is that row's out_h * out_w slice.
template <typename T>
void gather_offset(const T* src, const Conv2dGeometry& g, int64_t i, int64_t j, T* dst) {
    const int64_t oh = g.out_h(), ow = g.out_w();
    const int64_t x_off = j * g.dw - g.pl;
    int64_t lo, hi;
    valid_range(x_off, g.sw, g.w, ow, &lo, &hi);
    for (int64_t oy = 0; oy < oh; ++oy) {
        T* d = dst + oy * ow;
        const int64_t iy = oy * g.sh - g.pt + i * g.dh;
        if (iy < 0 || iy >= g.h) {
            for (int64_t ox = 0; ox < ow; ++ox) d[ox] = T(0);
            continue;
        }
        // index arithmetic rather than src + offset: offset may point before the plane
        const int64_t base = iy * g.w + x_off;
        for (int64_t ox = 0; ox < lo; ++ox) d[ox] = T(0);
        if (g.sw == 1) {
            for (int64_t ox = lo; ox < hi; ++ox) d[ox] = src[base + ox];
        } else {
            for (int64_t ox = lo; ox < hi; ++ox) d[ox] = src[base + ox * g.sw];
        }
        for (int64_t ox = hi; ox < ow; ++ox) d[ox] = T(0);
    }
}

// Adjoint of gather_offset: adds the row back into the plane.
template <typename T>
void scatter_offset(const T* col, const Conv2dGeometry& g, int64_t i, int64_t j, T* dst) {
    const int64_t oh = g.out_h(), ow = g.out_w();
    const int64_t x_off = j * g.dw - g.pl;
    int64_t lo, hi;
    valid_range(x_off, g.sw, g.w, ow, &lo, &hi);
    for (int64_t oy = 0; oy < oh; ++oy) {
        const int64_t iy = oy * g.sh - g.pt + i * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        const T* c = col + oy * ow;
        const int64_t base = iy * g.w + x_off;
        for (int64_t ox = lo; ox < hi; ++ox) dst[base + ox * g.sw] += c[ox];
    }
}

template <typename T>
void i2c(const T* x, const Conv2dGeometry& g, T* cols) {
    const int64_t plane = g.out_h() * g.out_w();
    const int64_t row = g.n * plane;
    const bool parallel = g.col_rows() * row >= kParallelMin;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t c = 0; c < g.c; ++c) {
            const T* src = x + (n * g.c + c) * g.h * g.w;
            for (int64_t i = 0; i < g.kh; ++i) {
                for (int64_t j = 0; j < g.kw; ++j) {
                    T* dst = cols + ((c * g.kh + i) * g.kw + j) * row + n * plane;
                    gather_offset(src, g, i, j, dst);
                }
            }
        }
    }
}

template <typename T>
void c2i(const T* cols, const Conv2dGeometry& g, T* x) {
    const int64_t plane = g.out_h() * g.out_w();
    const int64_t row = g.n * plane;
    const bool parallel = g.col_rows() * row >= kParallelMin;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t c = 0; c < g.c; ++c) {
            T* dst = x + (n * g.c + c) * g.h * g.w;
            for (int64_t k = 0; k < g.h * g.w; ++k) dst[k] = T(0);
            for (int64_t i = 0; i < g.kh; ++i) {
                for (int64_t j = 0; j < g.kw; ++j) {
                    const T* src = cols + ((c * g.kh + i) * g.kw + j) * row + n * plane;
                    scatter_offset(src, g, i, j, dst);
                }
            }
        }
    }
}

}  // namespace
}  // namespace tianyuan
