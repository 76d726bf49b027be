// Clamp drivers shared by every ISA translation unit (clamp.cpp, clamp_avx2.cpp,
// clamp_avx512.cpp): each includes this file into its own anonymous namespace and compiles
// it with its own flags; see clamp.h. No STL.
#pragma once

#include <cstdint>

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

inline void masked_grad_run(const float* g, const uint8_t* mask, int64_t n, float* gx) {
#pragma omp parallel for schedule(static) if (n >= kClampParallelMin)
    for (int64_t b = 0; b < (n + kClampBlock - 1) / kClampBlock; ++b) {
        const int64_t end = (b + 1) * kClampBlock < n ? (b + 1) * kClampBlock : n;
        for (int64_t i = b * kClampBlock; i < end; ++i) gx[i] = mask[i] ? g[i] : 0.0f;
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
    void masked_grad_##isa(const float* g, const uint8_t* mask, int64_t n, float* gx) {   \
        masked_grad_run(g, mask, n, gx);                                                  \
    }
