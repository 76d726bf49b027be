// Pooling drivers shared by every ISA translation unit (pool.cpp, pool_avx2.cpp,
// pool_avx512.cpp): each includes this file into its own anonymous namespace and compiles it
// with its own flags; see pool.h. One (n, c) plane per OpenMP work item; no STL.
#pragma once

#include <cstdint>

#include "pool/pool.h"

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

// Outputs [ox0, ox1) of output row oy (window rows start at y0 = oy * sh - ph, taps
// [i_lo, i_hi) inside the image): the max and its flat index in the plane, -1 (value 0) for a
// window outside the image. NaN propagates, as in PyTorch (the last NaN's index).
template <typename T>
void max_cells(const T* src, const Pool2dGeometry& g, int64_t y0, int64_t i_lo, int64_t i_hi,
               int64_t ox0, int64_t ox1, T* dst, int32_t* arg) {
    for (int64_t ox = ox0; ox < ox1; ++ox) {
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
        dst[ox] = best;
        arg[ox] = static_cast<int32_t>(best_index);
    }
}

// The columns [a, b) whose windows lie whole inside the image's width, the same for every
// output row.
inline void full_columns(const Pool2dGeometry& g, int64_t* a, int64_t* b) {
    const auto full = [&](int64_t ox) {
        int64_t lo, hi;
        taps(ox * g.sw - g.pw, g.dw, g.kw, g.w, &lo, &hi);
        return lo == 0 && hi == g.kw;
    };
    *a = 0;
    while (*a < g.out_w && !full(*a)) ++*a;
    *b = *a;
    while (*b < g.out_w && full(*b)) ++*b;
}

// Max pooling with argmax, one plane per work item. vec(src, g, y0, i_lo, i_hi, a, b, dst
// row, arg row) computes the full columns [a, b) of rows with taps inside the image, as
// max_cells does (an ISA's vector version); the others go through max_cells.
template <typename T, typename Vec>
void max_forward_by(const T* x, const Pool2dGeometry& g, T* out, int32_t* argmax, Vec vec) {
    const int64_t planes = g.n * g.c, in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
    int64_t a, b;
    full_columns(g, &a, &b);
#pragma omp parallel for schedule(static) if (planes * out_plane >= kParallelMin)
    for (int64_t p = 0; p < planes; ++p) {
        const T* src = x + p * in_plane;
        for (int64_t oy = 0; oy < g.out_h; ++oy) {
            const int64_t y0 = oy * g.sh - g.ph;
            int64_t i_lo, i_hi;
            taps(y0, g.dh, g.kh, g.h, &i_lo, &i_hi);
            T* dst = out + p * out_plane + oy * g.out_w;
            int32_t* arg = argmax + p * out_plane + oy * g.out_w;
            if (i_lo == i_hi || a == b) {
                max_cells(src, g, y0, i_lo, i_hi, 0, g.out_w, dst, arg);
                continue;
            }
            max_cells(src, g, y0, i_lo, i_hi, 0, a, dst, arg);
            vec(src, g, y0, i_lo, i_hi, a, b, dst, arg);
            max_cells(src, g, y0, i_lo, i_hi, b, g.out_w, dst, arg);
        }
    }
}

template <typename T>
void max_forward(const T* x, const Pool2dGeometry& g, T* out, int32_t* argmax) {
    max_forward_by(x, g, out, argmax, max_cells<T>);
}

// -1 (a window outside the image) adds nothing; an index past the plane is counted (the
// binding refuses it) and skipped: one compare, as the sign test it replaces.
template <typename T>
int64_t max_backward(const T* grad, const int32_t* argmax, const Pool2dGeometry& g, T* gx) {
    const int64_t planes = g.n * g.c, in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
    int64_t outside = 0;
#pragma omp parallel for schedule(static) reduction(+ : outside) \
    if (planes * out_plane >= kParallelMin)
    for (int64_t p = 0; p < planes; ++p) {
        T* dst = gx + p * in_plane;
        for (int64_t k = 0; k < in_plane; ++k) dst[k] = T(0);
        const T* gp = grad + p * out_plane;
        const int32_t* ap = argmax + p * out_plane;
        for (int64_t k = 0; k < out_plane; ++k) {
            const int64_t at = ap[k];
            if (static_cast<uint64_t>(at) < static_cast<uint64_t>(in_plane)) {
                dst[at] += gp[k];
            } else {
                outside += at != -1;
            }
        }
    }
    return outside;
}

// Max without argmax (inference), separably: per input row the max over each window's
// columns (tmp, h x out_w), then per output row the max over its window's tmp rows (unit
// stride over ox). rows[oy] / cols[ox] give the window's first in-image pixel, their count
// and step (the dilation); an empty window gives 0, any NaN gives NaN, as max_forward does.
template <typename T>
inline T take_max(T best, T v) {
    return (v > best || v != v) ? v : best;  // NaN propagates
}

// The max over one window of a row (the clipped edges).
template <typename T>
inline T max_window(const T* row, const PoolTaps& c) {
    const T* r = row + c.first;
    T best = c.count ? r[0] : T(0);
    for (int64_t j = 1; j < c.count; ++j) best = take_max(best, r[j * c.step]);
    return best;
}

// The full windows [a, b) of cols (count == kw), the same for every row of a call: found
// once per call (a scan per row had cost more than the maxima on 112-wide rows).
inline void full_windows(const PoolTaps* cols, int64_t ow, int64_t kw, int64_t* a, int64_t* b) {
    *a = 0;
    while (*a < ow && cols[*a].count != kw) ++*a;
    *b = *a;
    while (*b < ow && cols[*b].count == kw) ++*b;
}

// tmp[ox] = max over row's window columns; the full windows [a, b) tap by tap over a run of
// ox (compare-and-select, vectorised), the clipped edges one by one.
template <typename T>
void max_row(const T* row, int64_t ow, int64_t kw, int64_t sw, const PoolTaps* cols, int64_t a,
             int64_t b, T* tmp) {
    for (int64_t ox = 0; ox < a; ++ox) tmp[ox] = max_window(row, cols[ox]);
    for (int64_t ox = b; ox < ow; ++ox) tmp[ox] = max_window(row, cols[ox]);
    if (b == a) return;
    const int64_t n = b - a, step = cols[a].step;
    const T* __restrict base = row + cols[a].first;
    T* __restrict t = tmp + a;
    for (int64_t i = 0; i < n; ++i) t[i] = base[i * sw];
    for (int64_t j = 1; j < kw; ++j) {
        const T* __restrict tap = base + j * step;
        for (int64_t i = 0; i < n; ++i) t[i] = take_max(t[i], tap[i * sw]);
    }
}

// row_pass(src row, ow, kw, sw, cols, a, b, tmp row): max_row, or an ISA's own.
template <typename T, typename RowPass>
void max_values_by(const T* x, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                   int64_t kw, int64_t sw, const PoolTaps* rows, const PoolTaps* cols, T* out,
                   RowPass row_pass) {
    int64_t a, b;
    full_windows(cols, ow, kw, &a, &b);
#pragma omp parallel if (planes * oh * ow >= kParallelMin)
    {
        T* tmp = new T[h * ow];
#pragma omp for schedule(static)
        for (int64_t p = 0; p < planes; ++p) {
            const T* src = x + p * h * w;
            T* dst = out + p * oh * ow;
            for (int64_t y = 0; y < h; ++y)
                row_pass(src + y * w, ow, kw, sw, cols, a, b, tmp + y * ow);
            for (int64_t oy = 0; oy < oh; ++oy) {
                const PoolTaps r = rows[oy];
                T* __restrict d = dst + oy * ow;
                if (r.count == 0) {
                    for (int64_t ox = 0; ox < ow; ++ox) d[ox] = T(0);
                    continue;
                }
                const T* __restrict t0 = tmp + r.first * ow;
                for (int64_t ox = 0; ox < ow; ++ox) d[ox] = t0[ox];
                for (int64_t i = 1; i < r.count; ++i) {
                    const T* __restrict t = tmp + (r.first + i * r.step) * ow;
                    for (int64_t ox = 0; ox < ow; ++ox) d[ox] = take_max(d[ox], t[ox]);
                }
                for (int64_t ox = 0; ox < ow; ++ox)
                    if (cols[ox].count == 0) d[ox] = T(0);
            }
        }
        delete[] tmp;
    }
}

template <typename T>
void max_values(const T* x, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                int64_t kw, int64_t sw, const PoolTaps* rows, const PoolTaps* cols, T* out) {
    max_values_by(x, planes, h, w, oh, ow, kw, sw, rows, cols, out, max_row<T>);
}

// The vector versions of max_row (stride-2 rows of the inference pool) and max_cells (the
// training pool's full columns, strides 1 and 2) over V, an ISA's float vector of V::kLanes
// lanes (pool_avx2.cpp, pool_avx512.cpp): V::load(p, n) the first n lanes of p, V::even(p, n)
// p[0], p[2], ..., p[2 (n - 1)] (neither reads past what it returns), V::take(v, best) the
// lanes where take_max takes v, V::store(p, n, v) and the int32 index vectors likewise.
template <typename V>
void max_row_vec(const float* row, int64_t ow, int64_t kw, int64_t sw, const PoolTaps* cols,
                 int64_t a, int64_t b, float* tmp) {
    if (sw != 2 || b == a) {
        max_row(row, ow, kw, sw, cols, a, b, tmp);
        return;
    }
    for (int64_t ox = 0; ox < a; ++ox) tmp[ox] = max_window(row, cols[ox]);
    for (int64_t ox = b; ox < ow; ++ox) tmp[ox] = max_window(row, cols[ox]);
    const int64_t n = b - a, step = cols[a].step;
    const float* base = row + cols[a].first;
    for (int64_t i = 0; i < n; i += V::kLanes) {
        const int64_t lanes = n - i < V::kLanes ? n - i : V::kLanes;
        typename V::F best = V::even(base + 2 * i, lanes);
        for (int64_t j = 1; j < kw; ++j) {
            const typename V::F v = V::even(base + j * step + 2 * i, lanes);
            best = V::select(V::take(v, best), v, best);
        }
        V::store(tmp + a + i, lanes, best);
    }
}

// Value and index are chosen under one mask, so the argmax is max_cells' own (the first
// maximum; a NaN's index).
template <typename V>
void max_cells_vec(const float* src, const Pool2dGeometry& g, int64_t y0, int64_t i_lo,
                   int64_t i_hi, int64_t a, int64_t b, float* dst, int32_t* arg) {
    if (g.sw != 1 && g.sw != 2) {
        max_cells(src, g, y0, i_lo, i_hi, a, b, dst, arg);
        return;
    }
    for (int64_t ox = a; ox < b; ox += V::kLanes) {
        const int64_t lanes = b - ox < V::kLanes ? b - ox : V::kLanes;
        const int64_t x0 = ox * g.sw - g.pw;
        typename V::F best{};
        typename V::I index{};
        for (int64_t i = i_lo; i < i_hi; ++i) {
            const int64_t row = (y0 + i * g.dh) * g.w + x0;
            for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t at = row + j * g.dw;
                const typename V::F v = g.sw == 1 ? V::load(src + at, lanes)
                                                  : V::even(src + at, lanes);
                const typename V::I where = V::indices(at, g.sw);
                if (i == i_lo && j == 0) {  // the first tap (a NaN there takes its own index)
                    best = v;
                    index = where;
                    continue;
                }
                const typename V::M take = V::take(v, best);
                best = V::select(take, v, best);
                index = V::select_index(take, where, index);
            }
        }
        V::store(dst + ox, lanes, best);
        V::store_index(arg + ox, lanes, index);
    }
}

// Window of output index o along one axis: pixels [lo, hi) inside the image and the divisor
// (PyTorch's rule: the window clipped to the padded input for count_include_pad, to the
// image otherwise; the extra ceil_mode edge never counts).
inline PoolSpan avg_span(int64_t o, int64_t k, int64_t s, int64_t p, int64_t size, bool include) {
    const int64_t start = o * s - p;
    const int64_t end = start + k < size + p ? start + k : size + p;
    const int64_t lo = start > 0 ? start : 0, hi = end < size ? end : size;
    return {lo, hi > lo ? hi : lo, include ? end - start : (hi > lo ? hi - lo : 0)};
}

// Adaptive windows: [floor(o * size / out), ceil((o + 1) * size / out)).
inline PoolSpan adaptive_span(int64_t o, int64_t out, int64_t size) {
    const int64_t lo = o * size / out, hi = ((o + 1) * size + out - 1) / out;
    return {lo, hi, hi - lo};
}

// out[p][oy][ox] = mean of its window, separably: per input row the sums over each window's
// columns (tmp, h x ow), then per output row the sum of its window's tmp rows (unit stride).
template <typename T>
void mean_forward(const T* x, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                  const PoolSpan* rows, const PoolSpan* cols, T* out) {
#pragma omp parallel if (planes * oh * ow >= kParallelMin)
    {
        T* tmp = new T[h * ow];
#pragma omp for schedule(static)
        for (int64_t p = 0; p < planes; ++p) {
            const T* src = x + p * h * w;
            T* dst = out + p * oh * ow;
            for (int64_t y = 0; y < h; ++y)
                for (int64_t ox = 0; ox < ow; ++ox) {
                    T sum = T(0);
                    for (int64_t xx = cols[ox].lo; xx < cols[ox].hi; ++xx) sum += src[y * w + xx];
                    tmp[y * ow + ox] = sum;
                }
            for (int64_t oy = 0; oy < oh; ++oy) {
                T* __restrict d = dst + oy * ow;
                for (int64_t ox = 0; ox < ow; ++ox) d[ox] = T(0);
                for (int64_t y = rows[oy].lo; y < rows[oy].hi; ++y) {
                    const T* __restrict t = tmp + y * ow;
                    for (int64_t ox = 0; ox < ow; ++ox) d[ox] += t[ox];
                }
                for (int64_t ox = 0; ox < ow; ++ox)
                    d[ox] /= T(rows[oy].count * cols[ox].count);
            }
        }
        delete[] tmp;
    }
}

// gx (planes, h, w) = each output gradient spread evenly over its window's pixels.
template <typename T>
void mean_backward(const T* grad, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                   const PoolSpan* rows, const PoolSpan* cols, T* gx) {
#pragma omp parallel for schedule(static) if (planes * h * w >= kParallelMin)
    for (int64_t p = 0; p < planes; ++p) {
        T* dst = gx + p * h * w;
        const T* gp = grad + p * oh * ow;
        for (int64_t k = 0; k < h * w; ++k) dst[k] = T(0);
        for (int64_t oy = 0; oy < oh; ++oy) {
            const PoolSpan r = rows[oy];
            for (int64_t ox = 0; ox < ow; ++ox) {
                const PoolSpan c = cols[ox];
                const T share = gp[oy * ow + ox] / T(r.count * c.count);
                for (int64_t y = r.lo; y < r.hi; ++y)
                    for (int64_t xx = c.lo; xx < c.hi; ++xx) dst[y * w + xx] += share;
            }
        }
    }
}

}  // namespace
}  // namespace tianyuan
