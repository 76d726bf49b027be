// Batch-norm drivers shared by every ISA translation unit (batch_norm.cpp,
// batch_norm_avx2.cpp, batch_norm_avx512.cpp): each includes this file into its own
// anonymous namespace and compiles it with its own flags; see batch_norm.h. No STL.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "norm/batch_norm.h"
#include "runtime/unit_vector.h"

namespace tianyuan {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // values below which threads cost more than they save

// The backward's sums run in vectors of the unit's width (GCC vector types), in an order the
// source fixes (bn_plane_sums). omp simd had left it to the vectoriser, which summed the
// variant with a byte mask in other partial sums (16 lanes for the bytes on SSE2), so that its
// bits differed from the separate ops'.
constexpr int kBnBytes = kUnitVectorBytes;

// V: the lanes; I: integers of the lanes' width; pass(p): the bytes p[0..lanes) widened to I
// (__builtin_convertvector had extracted and inserted them one by one).
template <typename T>
struct BnLanes;
template <>
struct BnLanes<float> {
    typedef float V __attribute__((vector_size(kBnBytes)));
    typedef int32_t I __attribute__((vector_size(kBnBytes)));
    static I pass(const uint8_t* p) {
#if defined(__AVX512F__)
        return (I)_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#elif defined(__AVX2__)
        return (I)_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#else
        int32_t word;
        __builtin_memcpy(&word, p, sizeof(word));
        const __m128i z = _mm_setzero_si128();
        return (I)_mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(word), z), z);
#endif
    }
};
template <>
struct BnLanes<double> {
    typedef double V __attribute__((vector_size(kBnBytes)));
    typedef int64_t I __attribute__((vector_size(kBnBytes)));
    static I pass(const uint8_t* p) {
#if defined(__AVX512F__)
        return (I)_mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#elif defined(__AVX2__)
        int32_t word;
        __builtin_memcpy(&word, p, sizeof(word));
        return (I)_mm256_cvtepu8_epi64(_mm_cvtsi32_si128(word));
#else
        const __m128i z = _mm_setzero_si128();
        const __m128i b = _mm_cvtsi32_si128(p[0] | (p[1] << 8));
        return (I)_mm_unpacklo_epi32(_mm_unpacklo_epi16(_mm_unpacklo_epi8(b, z), z), z);
#endif
    }
};

// One plane's sum and sum of squares (in double), and where Extremes its min and max.
template <typename T, bool Extremes>
inline void bn_plane_stats(const T* p, int64_t s, double* sum, double* squares, T* lo, T* hi) {
    double a = 0.0, q = 0.0;
    if (Extremes) {  // s >= 1 (the binding's check)
        T l = p[0], h = p[0];
#pragma omp simd reduction(+ : a, q) reduction(min : l) reduction(max : h)
        for (int64_t k = 0; k < s; ++k) {
            const double v = p[k];
            a += v;
            q += v * v;
            l = p[k] < l ? p[k] : l;
            h = p[k] > h ? p[k] : h;
        }
        *lo = l < *lo ? l : *lo;
        *hi = h > *hi ? h : *hi;
    } else {
#pragma omp simd reduction(+ : a, q)
        for (int64_t k = 0; k < s; ++k) {
            const double v = p[k];
            a += v;
            q += v * v;
        }
    }
    *sum += a;
    *squares += q;
}

template <typename T, bool Extremes>
void bn_stats_as(const T* x, const BnShape& b, T* mean, T* var, T* xmin, T* xmax) {
    const double count = double(b.n * b.s);
#pragma omp parallel for schedule(static) if (b.n * b.c * b.s >= kParallelMin)
    for (int64_t c = 0; c < b.c; ++c) {
        // One pass, sum and sum of squares in double, in vector lanes (omp simd: without it
        // no reassociation is allowed and the sums ran as one scalar chain). E[x^2] - E[x]^2
        // in double loses ~1e-16 * E[x^2] / var relative, nothing for float32 data; one pass
        // in lanes, not two scalar ones (bench/RESULTS.md, training).
        double sum = 0.0, squares = 0.0;
        T lo = Extremes ? x[c * b.s] : T(0), hi = lo;
        for (int64_t n = 0; n < b.n; ++n)
            bn_plane_stats<T, Extremes>(x + (n * b.c + c) * b.s, b.s, &sum, &squares, &lo, &hi);
        const double m = sum / count, v = squares / count - m * m;
        mean[c] = T(m);
        var[c] = T(v > 0.0 ? v : 0.0);
        if (Extremes) {  // NaN where a value is (then so is the sum of squares): min_max's
            xmin[c] = squares == squares ? lo : T(squares);
            xmax[c] = squares == squares ? hi : T(squares);
        }
    }
}

template <typename T>
void bn_stats(const T* x, const BnShape& b, T* mean, T* var, T* xmin, T* xmax) {
    if (xmin)
        bn_stats_as<T, true>(x, b, mean, var, xmin, xmax);
    else
        bn_stats_as<T, false>(x, b, mean, var, xmin, xmax);
}

// The clamp's output for v (clamp_run's comparisons: NaN passes through)
template <typename T>
inline T bn_clamped(T v, T lo, T hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// One plane of the affine pass with fake_quantize_run's steps on its (clamped) value v
template <typename T, bool Clamp>
inline void bn_plane_fake_quant(const T* src, int64_t s, T a, T d, T lo, T hi,
                                const BnFakeQuant& fq, T* dst, uint8_t* in) {
    const T sc = T(fq.scale), qlo = T(fq.lo), qhi = T(fq.hi);
    for (int64_t k = 0; k < s; ++k) {
        const T v = Clamp ? bn_clamped(src[k] * a + d, lo, hi) : src[k] * a + d;
        const T q = std::rint(v / sc);  // half to even (nearbyint: a libm call a value)
        in[k] = (q >= qlo) & (q <= qhi);  // false for NaN
        T w = q >= qlo ? q : qlo;         // NaN too
        w = w <= qhi ? w : qhi;
        dst[k] = (w + T(0)) * sc;  // + 0: -0 as +0, the reference's int zero
    }
}

template <typename T>
void bn_affine(const T* x, const T* scale, const T* shift, const BnShape& b, T* y,
               const BnClamp<T>* act, const BnFakeQuant* fq) {
#pragma omp parallel for schedule(static) if (b.n * b.c * b.s >= kParallelMin)
    for (int64_t p = 0; p < b.n * b.c; ++p) {
        const T a = scale[p % b.c], d = shift[p % b.c];
        const T* src = x + p * b.s;
        T* dst = y + p * b.s;
        const T lo = act ? act->lo : T(0), hi = act ? act->hi : T(0);
        if (fq && act) {
            bn_plane_fake_quant<T, true>(src, b.s, a, d, lo, hi, *fq, dst, fq->inside + p * b.s);
        } else if (fq) {
            bn_plane_fake_quant<T, false>(src, b.s, a, d, lo, hi, *fq, dst, fq->inside + p * b.s);
        } else if (act) {
            for (int64_t k = 0; k < b.s; ++k) dst[k] = bn_clamped(src[k] * a + d, lo, hi);
        } else {
            for (int64_t k = 0; k < b.s; ++k) dst[k] = src[k] * a + d;
        }
    }
}

// gy where the fused clamp passed its input v (clamp_backward_run's test on the clamped
// output, which lies strictly inside exactly where v does), else 0
template <typename T>
inline T bn_masked(T g, T v, T lo, T hi) {
    return (v > lo && v < hi) ? g : T(0);
}

// The gradient that reaches the batch norm's output at value k of a plane: gy, then the fused
// clamp's mask (v as bn_affine computed it, from x), then the pass mask's (a straight-through
// estimator's after the clamp), each a select as the separate ops' backward passes.
template <typename T, bool Clamp, bool Pass>
inline T bn_grad_at(const T* g, const T* xs, const uint8_t* ps, int64_t k, T va, T vd, T lo,
                    T hi) {
    T gk = g[k];
    if (Clamp) gk = bn_masked(gk, xs[k] * va + vd, lo, hi);
    if (Pass) gk = ps[k] ? gk : T(0);
    return gk;
}

// bn_grad_at for a vector of values from k (xv: x there)
template <typename T, bool Clamp, bool Pass>
inline typename BnLanes<T>::V bn_lanes_grad(const T* g, const typename BnLanes<T>::V& xv,
                                            const uint8_t* ps, T va, T vd, T lo, T hi) {
    typedef typename BnLanes<T>::V V;
    const V zero = V{};
    V gv;
    __builtin_memcpy(&gv, g, sizeof(gv));
    if (Clamp) {  // bn_masked's test
        const V v = xv * va + vd;
        gv = (v > lo) & (v < hi) ? gv : zero;
    }
    if (Pass) gv = BnLanes<T>::pass(ps) != 0 ? gv : zero;
    return gv;
}

// One vector of bn_plane_sums: gk into vs, gk * (x - m) into vx.
template <typename T, bool Clamp, bool Pass>
inline void bn_lanes_step(const T* g, const T* xs, const uint8_t* ps, T m, T va, T vd, T lo,
                          T hi, typename BnLanes<T>::V* vs, typename BnLanes<T>::V* vx) {
    typename BnLanes<T>::V xv;
    __builtin_memcpy(&xv, xs, sizeof(xv));
    const typename BnLanes<T>::V gv = bn_lanes_grad<T, Clamp, Pass>(g, xv, ps, va, vd, lo, hi);
    *vs += gv;
    *vx += gv * (xv - m);
}

// sum gk and sum gk * (x - m) over a plane of s values, gk = bn_grad_at: in lanes, the last
// few as one more vector padded with zeros (a scalar tail, which the vectoriser took in part,
// had multiply-added in one variant and not in another), then the lanes in turn.
template <typename T, bool Clamp, bool Pass>
inline void bn_plane_sums(const T* g, const T* xs, const uint8_t* ps, int64_t s, T m, T va, T vd,
                          T lo, T hi, T* sg_out, T* sgx_out) {
    typedef typename BnLanes<T>::V V;
    constexpr int64_t kLanes = kBnBytes / sizeof(T);
    V vs = V{}, vx = V{};
    int64_t k = 0;
    for (; k + kLanes <= s; k += kLanes)
        bn_lanes_step<T, Clamp, Pass>(g + k, xs + k, Pass ? ps + k : nullptr, m, va, vd, lo, hi,
                                      &vs, &vx);
    if (k < s) {
        T gt[kLanes] = {}, xt[kLanes] = {};
        uint8_t pt[kLanes] = {};
        for (int64_t j = 0; j < s - k; ++j) {
            gt[j] = g[k + j];
            xt[j] = xs[k + j];
            if (Pass) pt[j] = ps[k + j];
        }
        bn_lanes_step<T, Clamp, Pass>(gt, xt, pt, m, va, vd, lo, hi, &vs, &vx);
    }
    T sg = T(0), sgx = T(0);
    for (int64_t j = 0; j < kLanes; ++j) {
        sg += vs[j];
        sgx += vx[j];
    }
    *sg_out = sg;
    *sgx_out = sgx;
}

// gx over a plane of s values: a * gk + k * (x - m) + d, in lanes, then the last few
template <typename T, bool Clamp, bool Pass>
inline void bn_plane_grad(const T* g, const T* xs, const uint8_t* ps, int64_t s, T m, T va, T vd,
                          T lo, T hi, T a, T k, T d, T* out) {
    typedef typename BnLanes<T>::V V;
    constexpr int64_t kLanes = kBnBytes / sizeof(T);
    int64_t q = 0;
    for (; q + kLanes <= s; q += kLanes) {
        V xv;
        __builtin_memcpy(&xv, xs + q, sizeof(xv));
        const V gv = bn_lanes_grad<T, Clamp, Pass>(g + q, xv, Pass ? ps + q : nullptr, va, vd,
                                                   lo, hi);
        const V o = a * gv + k * (xv - m) + d;
        __builtin_memcpy(out + q, &o, sizeof(o));
    }
    for (; q < s; ++q)
        out[q] = a * bn_grad_at<T, Clamp, Pass>(g, xs, ps, q, va, vd, lo, hi) + k * (xs[q] - m) + d;
}

template <typename T, bool Clamp, bool Pass>
void bn_backward_as(const T* gy, const T* x, const T* mean, const T* invstd, const T* weight,
                    const BnShape& b, T* gx, T* gweight, T* gbias, const BnClamp<T>* act,
                    const uint8_t* pass) {
    const double count = double(b.n * b.s);
    const T lo = Clamp ? act->lo : T(0), hi = Clamp ? act->hi : T(0);
#pragma omp parallel for schedule(static) if (b.n * b.c * b.s >= kParallelMin)
    for (int64_t c = 0; c < b.c; ++c) {
        const T m = mean[c];
        const T va = Clamp ? act->scale[c] : T(0), vd = Clamp ? act->shift[c] : T(0);
        double sum_g = 0.0, sum_gx = 0.0;  // sum gy, sum gy * (x - mean)
        for (int64_t n = 0; n < b.n; ++n) {
            const int64_t at = (n * b.c + c) * b.s;
            // per plane in T, in vector lanes (not a scalar chain), then into double
            T sg = T(0), sgx = T(0);
            bn_plane_sums<T, Clamp, Pass>(gy + at, x + at, Pass ? pass + at : nullptr, b.s, m, va,
                                          vd, lo, hi, &sg, &sgx);
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
            const int64_t at = (n * b.c + c) * b.s;
            bn_plane_grad<T, Clamp, Pass>(gy + at, x + at, Pass ? pass + at : nullptr, b.s, m, va,
                                          vd, lo, hi, a, k, d, gx + at);
        }
    }
}

template <typename T>
void bn_backward(const T* gy, const T* x, const T* mean, const T* invstd, const T* weight,
                 const BnShape& b, T* gx, T* gweight, T* gbias, const BnClamp<T>* act,
                 const uint8_t* pass) {
    if (act && pass)
        bn_backward_as<T, true, true>(gy, x, mean, invstd, weight, b, gx, gweight, gbias, act,
                                      pass);
    else if (act)
        bn_backward_as<T, true, false>(gy, x, mean, invstd, weight, b, gx, gweight, gbias, act,
                                       pass);
    else if (pass)
        bn_backward_as<T, false, true>(gy, x, mean, invstd, weight, b, gx, gweight, gbias, act,
                                       pass);
    else
        bn_backward_as<T, false, false>(gy, x, mean, invstd, weight, b, gx, gweight, gbias, act,
                                        pass);
}

}  // namespace
}  // namespace tianyuan
