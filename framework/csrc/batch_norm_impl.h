// Batch-norm drivers shared by every ISA translation unit (batch_norm.cpp,
// batch_norm_avx2.cpp, batch_norm_avx512.cpp): each includes this file into its own
// anonymous namespace and compiles it with its own flags; see batch_norm.h. No STL.
#pragma once

#include <cstdint>

#include "batch_norm.h"

namespace tianyuan {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // values below which threads cost more than they save

template <typename T>
void bn_stats(const T* x, const BnShape& b, T* mean, T* var) {
    const double count = double(b.n * b.s);
#pragma omp parallel for schedule(static) if (b.n * b.c * b.s >= kParallelMin)
    for (int64_t c = 0; c < b.c; ++c) {
        // One pass, sum and sum of squares in double, in vector lanes (omp simd: without it
        // no reassociation is allowed and the sums ran as one scalar chain). E[x^2] - E[x]^2
        // in double loses ~1e-16 * E[x^2] / var relative, nothing for float32 data. Two
        // scalar passes took 14-16 ms for (8, 96, 112, 112) at 2 threads, this 1.0-1.8.
        double sum = 0.0, squares = 0.0;
        for (int64_t n = 0; n < b.n; ++n) {
            const T* p = x + (n * b.c + c) * b.s;
            double s = 0.0, q = 0.0;
#pragma omp simd reduction(+ : s, q)
            for (int64_t k = 0; k < b.s; ++k) {
                const double v = p[k];
                s += v;
                q += v * v;
            }
            sum += s;
            squares += q;
        }
        const double m = sum / count, v = squares / count - m * m;
        mean[c] = T(m);
        var[c] = T(v > 0.0 ? v : 0.0);
    }
}

template <typename T>
void bn_affine(const T* x, const T* scale, const T* shift, const BnShape& b, T* y,
               const BnClamp<T>* act) {
#pragma omp parallel for schedule(static) if (b.n * b.c * b.s >= kParallelMin)
    for (int64_t p = 0; p < b.n * b.c; ++p) {
        const T a = scale[p % b.c], d = shift[p % b.c];
        const T* src = x + p * b.s;
        T* dst = y + p * b.s;
        if (!act) {
            for (int64_t k = 0; k < b.s; ++k) dst[k] = src[k] * a + d;
            continue;
        }
        const T lo = act->lo, hi = act->hi;
        for (int64_t k = 0; k < b.s; ++k) {
            const T v = src[k] * a + d;  // clamp_run's comparisons: NaN passes through
            dst[k] = v < lo ? lo : (v > hi ? hi : v);
        }
    }
}

// gy where the fused clamp passed its input v (clamp_backward_run's test on the clamped
// output, which lies strictly inside exactly where v does), else 0
template <typename T>
inline T bn_masked(T g, T v, T lo, T hi) {
    return (v > lo && v < hi) ? g : T(0);
}

template <typename T>
void bn_backward(const T* gy, const T* x, const T* mean, const T* invstd, const T* weight,
                 const BnShape& b, T* gx, T* gweight, T* gbias, const BnClamp<T>* act) {
    const double count = double(b.n * b.s);
    const T lo = act ? act->lo : T(0), hi = act ? act->hi : T(0);
#pragma omp parallel for schedule(static) if (b.n * b.c * b.s >= kParallelMin)
    for (int64_t c = 0; c < b.c; ++c) {
        const T m = mean[c];
        const T va = act ? act->scale[c] : T(0), vd = act ? act->shift[c] : T(0);
        double sum_g = 0.0, sum_gx = 0.0;  // sum gy, sum gy * (x - mean)
        for (int64_t n = 0; n < b.n; ++n) {
            const T* g = gy + (n * b.c + c) * b.s;
            const T* xs = x + (n * b.c + c) * b.s;
            // per plane in T, in vector lanes (omp simd; the scalar chain had made the backward
            // 2-3x slower), then into double
            T sg = T(0), sgx = T(0);
            if (act) {  // v as bn_affine computed it
#pragma omp simd reduction(+ : sg, sgx)
                for (int64_t k = 0; k < b.s; ++k) {
                    const T gk = bn_masked(g[k], xs[k] * va + vd, lo, hi);
                    sg += gk;
                    sgx += gk * (xs[k] - m);
                }
            } else {
#pragma omp simd reduction(+ : sg, sgx)
                for (int64_t k = 0; k < b.s; ++k) {
                    sg += g[k];
                    sgx += g[k] * (xs[k] - m);
                }
            }
            sum_g += sg;
            sum_gx += sgx;
        }
        const double inv = invstd[c];
        if (gbias) gbias[c] = T(sum_g);
        if (gweight) gweight[c] = T(sum_gx * inv);
        if (!gx) continue;
        const double w = weight ? weight[c] : 1.0;
        // gx = a * gy + k * (x - mean) + d
        const T a = T(w * inv), k = T(-w * inv * inv * inv * sum_gx / count);
        const T d = T(-w * inv * sum_g / count);
        for (int64_t n = 0; n < b.n; ++n) {
            const T* g = gy + (n * b.c + c) * b.s;
            const T* xs = x + (n * b.c + c) * b.s;
            T* out = gx + (n * b.c + c) * b.s;
            if (act) {
                for (int64_t q = 0; q < b.s; ++q)
                    out[q] = a * bn_masked(g[q], xs[q] * va + vd, lo, hi) + k * (xs[q] - m) + d;
            } else {
                for (int64_t q = 0; q < b.s; ++q) out[q] = a * g[q] + k * (xs[q] - m) + d;
            }
        }
    }
}

}  // namespace
}  // namespace tianyuan
