// AVX-512 row kernels for the depthwise drivers (depthwise_impl.h), float32: 16 lanes a step,
// stride 1 and 2 vectorised (stride 2 through a two-register even-lane permute), tails with
// masked loads/stores (masked-off lanes never fault, so rows may end anywhere). Output planes
// up to 128x128 with kernels up to 5x5 run as flat runs of positions instead
// (depthwise_flat_avx512.cpp); larger ones row by row, the forward with every tap in a
// register (forward_register).
#include <immintrin.h>

#include <cstdint>

#include "depthwise/depthwise.h"
#include "depthwise/depthwise_impl.h"

namespace tianyuan {
namespace {

inline __mmask16 low_bits(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// x[0], x[2], ..., x[2*(n-1)] for n <= 16 as one vector (lanes >= n are 0).
inline __m512 load_even(const float* x, int64_t n) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const int64_t span = 2 * n - 1;  // elements actually needed
    const __m512 x0 = _mm512_maskz_loadu_ps(low_bits(span), x);
    const __m512 x1 = _mm512_maskz_loadu_ps(low_bits(span - 16), x + 16);
    return _mm512_permutex2var_ps(x0, even, x1);
}

// y[2k] += v[k] for k < n <= 16; odd y lanes are stored back unchanged.
inline void add_even(float* y, __m512 v, int64_t n) {
    const __m512i lo_idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i hi_idx = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14,
                                             14, 15, 15);
    const __mmask16 m0 = low_bits(2 * n - 1), m1 = low_bits(2 * n - 17);
    const __mmask16 even = 0x5555;
    __m512 y0 = _mm512_maskz_loadu_ps(m0, y);
    y0 = _mm512_mask_add_ps(y0, even, y0, _mm512_permutexvar_ps(lo_idx, v));
    _mm512_mask_storeu_ps(y, m0, y0);
    if (m1) {
        __m512 y1 = _mm512_maskz_loadu_ps(m1, y + 16);
        y1 = _mm512_mask_add_ps(y1, even, y1, _mm512_permutexvar_ps(hi_idx, v));
        _mm512_mask_storeu_ps(y + 16, m1, y1);
    }
}

struct Avx512Rows {
    static void axpy(float* y, const float* x, float a, int64_t n, int64_t sx) {
        const __m512 va = _mm512_set1_ps(a);
        if (sx == 1) {
            for (int64_t k = 0; k < n; k += 16) {
                const __mmask16 m = low_bits(n - k);
                const __m512 r = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + k),
                                                 _mm512_maskz_loadu_ps(m, y + k));
                _mm512_mask_storeu_ps(y + k, m, r);
            }
        } else if (sx == 2) {
            for (int64_t k = 0; k < n; k += 16) {
                const __mmask16 m = low_bits(n - k);
                const __m512 xv = load_even(x + 2 * k, n - k < 16 ? n - k : 16);
                const __m512 r = _mm512_fmadd_ps(va, xv, _mm512_maskz_loadu_ps(m, y + k));
                _mm512_mask_storeu_ps(y + k, m, r);
            }
        } else {
            for (int64_t k = 0; k < n; ++k) y[k] += a * x[k * sx];
        }
    }

    static void scatter(float* y, const float* x, float a, int64_t n, int64_t sy) {
        if (sy == 1) return axpy(y, x, a, n, 1);
        if (sy != 2) {
            for (int64_t k = 0; k < n; ++k) y[k * sy] += a * x[k];
            return;
        }
        const __m512 va = _mm512_set1_ps(a);
        for (int64_t k = 0; k < n; k += 16) {
            const int64_t len = n - k < 16 ? n - k : 16;
            const __m512 v = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(low_bits(len), x + k));
            add_even(y + 2 * k, v, len);
        }
    }

    static float dot(const float* a, const float* x, int64_t n, int64_t sx) {
        __m512 acc = _mm512_setzero_ps();
        if (sx == 1 || sx == 2) {
            for (int64_t k = 0; k < n; k += 16) {
                const int64_t len = n - k < 16 ? n - k : 16;
                const __mmask16 m = low_bits(len);
                const __m512 xv = sx == 1 ? _mm512_maskz_loadu_ps(m, x + k)
                                          : load_even(x + 2 * k, len);
                acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), xv, acc);
            }
            return _mm512_reduce_add_ps(acc);
        }
        float s = 0.0f;
        for (int64_t k = 0; k < n; ++k) s += a[k] * x[k * sx];
        return s;
    }
};

// Lanes [lo, hi) of a 16-lane step as a mask (empty when hi <= lo).
inline __mmask16 lane_range(int64_t lo, int64_t hi) {
    return hi <= lo ? __mmask16(0) : __mmask16(low_bits(hi) & ~low_bits(lo));
}

// x[2k] for lanes k in mask m of a 16-lane step starting at x (other lanes 0). Valid lanes
// are contiguous, so the elements read are [2*first, 2*last]; masked-off lanes never fault.
inline __m512 load_even_masked(const float* x, int64_t lo, int64_t hi) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const int64_t e0 = 2 * lo, e1 = 2 * hi - 1;  // element range [e0, e1)
    const __m512 x0 = _mm512_maskz_loadu_ps(lane_range(e0, e1), x);
    const __m512 x1 = _mm512_maskz_loadu_ps(lane_range(e0 - 16, e1 - 16), x + 16);
    return _mm512_permutex2var_ps(x0, even, x1);
}

// 16 unit-stride outputs whose taps all lie inside the row: plain loads, no masks.
inline void forward_inner16(const float* x, const float* w, float b, const Conv2dGeometry& g,
                            int64_t oy, int64_t ox0, float* orow) {
    __m512 acc = _mm512_set1_ps(b);
    for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t iy = oy * g.sh - g.pt + i * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        const float* src = x + iy * g.w + ox0 - g.pl;
        const float* wi = w + i * g.kw;
        for (int64_t j = 0; j < g.kw; ++j) {
            acc = _mm512_fmadd_ps(_mm512_set1_ps(wi[j]), _mm512_loadu_ps(src + j * g.dw), acc);
        }
    }
    _mm512_storeu_ps(orow + ox0, acc);
}

// One output row, 16 columns a step, every tap accumulated in a register (stride 1 or 2).
void forward_row(const float* x, const float* w, float b, const Conv2dGeometry& g, int64_t oy,
                 const TapRange* ranges, float* orow) {
    const int64_t ow = g.out_w();
    // columns where every tap is inside the row: tap 0 reaches furthest left, tap kw-1
    // furthest right
    const int64_t inner_lo = ranges[0].lo, inner_hi = ranges[g.kw - 1].hi;
    for (int64_t ox0 = 0; ox0 < ow; ox0 += 16) {
        const int64_t n = ow - ox0 < 16 ? ow - ox0 : 16;
        if (g.sw == 1 && n == 16 && ox0 >= inner_lo && ox0 + 16 <= inner_hi) {
            forward_inner16(x, w, b, g, oy, ox0, orow);
            continue;
        }
        __m512 acc = _mm512_set1_ps(b);
        for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t iy = oy * g.sh - g.pt + i * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            const float* xrow = x + iy * g.w;
            for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t lo = ranges[j].lo > ox0 ? ranges[j].lo - ox0 : 0;
                const int64_t hi = ranges[j].hi < ox0 + n ? ranges[j].hi - ox0 : n;
                if (lo >= hi) continue;
                // lanes outside [lo, hi) are masked: the address may lie outside the row
                const float* src = xrow + (ox0 * g.sw + j * g.dw - g.pl);
                const __m512 v = g.sw == 1 ? _mm512_maskz_loadu_ps(lane_range(lo, hi), src)
                                           : load_even_masked(src, lo, hi);
                acc = _mm512_fmadd_ps(_mm512_set1_ps(w[i * g.kw + j]), v, acc);
            }
        }
        _mm512_mask_storeu_ps(orow + ox0, low_bits(n), acc);
    }
}

constexpr int64_t kMaxTaps = 64;  // kernel widths above this use the row-axpy driver

void forward_register(const float* x, const float* w, const float* bias,
                      const Conv2dGeometry& g, float* out) {
    const int64_t in_plane = g.h * g.w, oh = g.out_h(), ow = g.out_w(), k = g.kh * g.kw;
    TapRange ranges[kMaxTaps];
    for (int64_t j = 0; j < g.kw; ++j) ranges[j] = tap_range(j * g.dw - g.pl, g.sw, g.w, ow);
    const bool parallel = g.n * g.c * oh * ow * k >= kDwParallelMin;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (int64_t p = 0; p < g.n * g.c; ++p) {
        for (int64_t oy = 0; oy < oh; ++oy) {
            const int64_t c = p % g.c;
            forward_row(x + p * in_plane, w + c * k, bias ? bias[c] : 0.0f, g, oy, ranges,
                        out + (p * oh + oy) * ow);
        }
    }
}

}  // namespace

void depthwise_forward_avx512(const float* x, const float* w, const float* bias,
                              const Conv2dGeometry& g, float* out) {
    if (depthwise_flat_forward_avx512(x, w, bias, g, out)) return;
    if ((g.sw == 1 || g.sw == 2) && g.kw <= kMaxTaps) return forward_register(x, w, bias, g, out);
    dw_forward<float, Avx512Rows>(x, w, bias, g, out);
}

void depthwise_backward_input_avx512(const float* gy, const float* w, const Conv2dGeometry& g,
                                     float* gx) {
    if (depthwise_flat_backward_input_avx512(gy, w, g, gx)) return;
    dw_backward_input<float, Avx512Rows>(gy, w, g, gx);
}

void depthwise_backward_weight_avx512(const float* x, const float* gy, const Conv2dGeometry& g,
                                      float* gw) {
    if (depthwise_flat_backward_weight_avx512(x, gy, g, gw)) return;
    dw_backward_weight<float, Avx512Rows>(x, gy, g, gw);
}

}  // namespace tianyuan
