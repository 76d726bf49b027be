// Clamp drivers shared by every ISA translation unit (clamp.cpp, clamp_avx2.cpp,
// clamp_avx512.cpp): each includes this file into its own anonymous namespace and compiles
// it with its own flags; see clamp.h. No STL.
#pragma once

#include <cstdint>

#include "runtime/unit_vector.h"

namespace tianyuan {
namespace {

constexpr int64_t kClampBlock = 1 << 14;         // values per OpenMP work item (64 KiB)
constexpr int64_t kClampParallelMin = 1 << 16;  // below: one thread

inline void clamp_run(const float* x, int64_t n, float lo, float hi, float* y) {
#pragma omp parallel for schedule(static) if (n >= kClampParallelMin)
    for (int64_t b = 0; b < (n + kClampBlock - 1) / kClampBlock; ++b) {
        const int64_t end = (b + 1) * kClampBlock < n ? (b + 1) * kClampBlock : n;
        for (int64_t i = b * kClampBlock; i < end; ++i) {
            const float v = x[i];  // comparisons with NaN are false: NaN passes through
            y[i] = v < lo ? lo : (v > hi ? hi : v);
        }
    }
}

inline void clamp_backward_run(const float* g, const float* y, int64_t n, float lo, float hi,
                               float* gx) {
#pragma omp parallel for schedule(static) if (n >= kClampParallelMin)
    for (int64_t b = 0; b < (n + kClampBlock - 1) / kClampBlock; ++b) {
        const int64_t end = (b + 1) * kClampBlock < n ? (b + 1) * kClampBlock : n;
        for (int64_t i = b * kClampBlock; i < end; ++i)
            gx[i] = (y[i] > lo && y[i] < hi) ? g[i] : 0.0f;
    }
}

// y = clamp(a + b) as clamp_run's (a residual add and its ReLU in one pass).
inline void add_clamp_run(const float* a, const float* b, int64_t n, float lo, float hi,
                          float* y) {
#pragma omp parallel for schedule(static) if (n >= kClampParallelMin)
    for (int64_t blk = 0; blk < (n + kClampBlock - 1) / kClampBlock; ++blk) {
        const int64_t end = (blk + 1) * kClampBlock < n ? (blk + 1) * kClampBlock : n;
        for (int64_t i = blk * kClampBlock; i < end; ++i) {
            const float v = a[i] + b[i];
            y[i] = v < lo ? lo : (v > hi ? hi : v);
        }
    }
}

inline void masked_grad_run(const float* g, const uint8_t* mask, int64_t n, float* gx) {
#pragma omp parallel for schedule(static) if (n >= kClampParallelMin)
    for (int64_t b = 0; b < (n + kClampBlock - 1) / kClampBlock; ++b) {
        const int64_t end = (b + 1) * kClampBlock < n ? (b + 1) * kClampBlock : n;
        for (int64_t i = b * kClampBlock; i < end; ++i) gx[i] = mask[i] ? g[i] : 0.0f;
    }
}

// min and max of x (n >= 1), NaN if any value is NaN (numpy's min / max): blocks of values
// in parallel, each block's extremes kept, then combined (min and max are exact in any order).
// Each block keeps a vector of running extremes and NaN flags in GCC vector types of the
// unit's width (the compiler would not vectorise a scalar reduction of `v < l ? v : l`, for
// NaN's sake, nor lanes written as arrays; 64-byte vectors on SSE2 are emulated, far
// slower).
constexpr int kMinMaxBytes = kUnitVectorBytes;
typedef float MinMaxF __attribute__((vector_size(kMinMaxBytes)));
typedef int32_t MinMaxI __attribute__((vector_size(kMinMaxBytes)));

// The extremes of x[begin, end) (non-empty) and whether any is NaN, in the unit's vectors.
inline void min_max_span(const float* x, int64_t begin, int64_t end, float* lo, float* hi,
                         bool* nan) {
    constexpr int64_t kLanes = kMinMaxBytes / 4;
    MinMaxF l = MinMaxF{} + x[begin], h = l;
    MinMaxI bad = MinMaxI{};
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
        MinMaxF v;
        __builtin_memcpy(&v, x + i, sizeof(v));
        l = v < l ? v : l;
        h = v > h ? v : h;
        bad |= v != v;
    }
    float bl = x[begin], bh = bl;
    bool bb = bl != bl;
    for (int64_t k = 0; k < kLanes; ++k) {
        bl = l[k] < bl ? l[k] : bl;
        bh = h[k] > bh ? h[k] : bh;
        bb = bb || bad[k] != 0;
    }
    for (; i < end; ++i) {
        const float v = x[i];
        bl = v < bl ? v : bl;
        bh = v > bh ? v : bh;
        bb = bb || v != v;
    }
    *lo = bl;
    *hi = bh;
    *nan = bb;
}

inline void min_max_run(const float* x, int64_t n, float* lo_out, float* hi_out) {
    const int64_t blocks = (n + kClampBlock - 1) / kClampBlock;
    float lo = x[0], hi = x[0];
    bool nan = false;
#pragma omp parallel for schedule(static) if (n >= kClampParallelMin) \
    reduction(min : lo) reduction(max : hi) reduction(|| : nan)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t begin = b * kClampBlock;
        const int64_t end = begin + kClampBlock < n ? begin + kClampBlock : n;
        float bl, bh;
        bool bb;
        min_max_span(x, begin, end, &bl, &bh, &bb);
        lo = bl < lo ? bl : lo;
        hi = bh > hi ? bh : hi;
        nan = nan || bb;
    }
    const float q = __builtin_nanf("");
    *lo_out = nan ? q : lo;
    *hi_out = nan ? q : hi;
}

// Each row's min_max of x (rows, cols), cols >= 1: rows in parallel (the weight observers'
// per-channel extremes, one call a tensor where numpy took two passes on one core).
inline void min_max_rows_run(const float* x, int64_t rows, int64_t cols, float* lo, float* hi) {
    const float q = __builtin_nanf("");
#pragma omp parallel for schedule(static) if (rows * cols >= kClampParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        bool nan;
        min_max_span(x, r * cols, (r + 1) * cols, lo + r, hi + r, &nan);
        if (nan) lo[r] = hi[r] = q;
    }
}

}  // namespace
}  // namespace tianyuan

// The entry points of one ISA's unit (clamp.h), over this unit's build of the drivers.
#define TY_CLAMP_DEFINE(isa)                                                              \
    void clamp_forward_##isa(const float* x, int64_t n, float lo, float hi, float* y) {   \
        clamp_run(x, n, lo, hi, y);                                                       \
    }                                                                                     \
    void clamp_backward_##isa(const float* g, const float* y, int64_t n, float lo,        \
                              float hi, float* gx) {                                      \
        clamp_backward_run(g, y, n, lo, hi, gx);                                          \
    }                                                                                     \
    void add_clamp_##isa(const float* a, const float* b, int64_t n, float lo, float hi,   \
                         float* y) {                                                      \
        add_clamp_run(a, b, n, lo, hi, y);                                                \
    }                                                                                     \
    void masked_grad_##isa(const float* g, const uint8_t* mask, int64_t n, float* gx) {   \
        masked_grad_run(g, mask, n, gx);                                                  \
    }                                                                                     \
    void min_max_rows_##isa(const float* x, int64_t rows, int64_t cols, float* lo,        \
                            float* hi) {                                                  \
        min_max_rows_run(x, rows, cols, lo, hi);                                          \
    }                                                                                     \
    void min_max_##isa(const float* x, int64_t n, float* lo, float* hi) {                 \
        min_max_run(x, n, lo, hi);                                                        \
    }
