// AVX2 depthwise kernels, float32: the forward on zero-padded planes (below); the gradients
// on the row kernels of the shared drivers (depthwise_impl.h), 8 lanes a step for unit
// stride, scalar tails and scalar strided rows. Where they pay, the kernels with the channels
// in the lanes run instead (depthwise_lanes_avx2.cpp: the forward on small maps and at
// stride 2, the strided input gradient likewise, the weight gradient from 8 channels).
#include <immintrin.h>

#include <cstdint>

#include "depthwise/depthwise.h"
#include "depthwise/depthwise_impl.h"

namespace tianyuan {
namespace {

struct Avx2Rows {
    static void axpy(float* y, const float* x, float a, int64_t n, int64_t sx) {
        int64_t k = 0;
        if (sx == 1) {
            const __m256 va = _mm256_set1_ps(a);
            for (; k + 8 <= n; k += 8) {
                _mm256_storeu_ps(y + k, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + k),
                                                        _mm256_loadu_ps(y + k)));
            }
        }
        for (; k < n; ++k) y[k] += a * x[k * sx];
    }

    static void scatter(float* y, const float* x, float a, int64_t n, int64_t sy) {
        if (sy == 1) return axpy(y, x, a, n, 1);
        for (int64_t k = 0; k < n; ++k) y[k * sy] += a * x[k];
    }

    static float dot(const float* a, const float* x, int64_t n, int64_t sx) {
        int64_t k = 0;
        float s = 0.0f;
        if (sx == 1 && n >= 8) {
            __m256 acc = _mm256_setzero_ps();
            for (; k + 8 <= n; k += 8) {
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(x + k), acc);
            }
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
            s = _mm_cvtss_f32(h);
        }
        for (; k < n; ++k) s += a[k] * x[k * sx];
        return s;
    }
};

// The forward plane by plane from a zero-padded copy: every tap of 8 or 16 outputs is then an
// unconditional load (stride 1), two loads and a shuffle (stride 2: the even columns of 16) or
// a gather, accumulated in registers and stored once. The row kernel (a load and store of the
// output row per tap, strided rows scalar) was several times slower (bench/RESULTS.md, fp32
// kernels: depthwise on AVX2).
struct Padded {
    int64_t oh, ow, hp, wp;
};

Padded padded_size(const Conv2dGeometry& g) {
    Padded p{g.out_h(), g.out_w(), 0, 0};
    const int64_t owv = (p.ow + 7) / 8 * 8;  // outputs computed, in whole vectors
    p.hp = (p.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1;
    p.wp = (owv - 1) * g.sw + (g.kw - 1) * g.dw + 1 + (g.sw == 2 ? 1 : 0);
    return p;
}

// Grow-only per-thread scratch (no STL in an ISA translation unit).
float* scratch(int64_t n) {
    static thread_local float* buf = nullptr;
    static thread_local int64_t size = 0;
    if (size < n) {
        delete[] buf;
        buf = new float[static_cast<size_t>(n)];
        size = n;
    }
    return buf;
}

// xp (hp, wp) = x (h, w) at (pt, pl), zero elsewhere (input rows and columns past the padded
// extent are never read).
void pad_plane(const float* x, const Conv2dGeometry& g, const Padded& p, float* xp) {
    for (int64_t k = 0; k < p.hp * p.wp; ++k) xp[k] = 0.0f;
    const int64_t cols = g.w < p.wp - g.pl ? g.w : p.wp - g.pl;
    for (int64_t y = 0; y < g.h && g.pt + y < p.hp; ++y)
        for (int64_t c = 0; c < cols; ++c) xp[(g.pt + y) * p.wp + g.pl + c] = x[y * g.w + c];
}

// 8 taps' inputs from `at` (lane l: column l * sw).
inline __m256 tap8(const float* at, int64_t sw, __m256i idx) {
    if (sw == 1) return _mm256_loadu_ps(at);
    if (sw == 2) {
        const __m256 e = _mm256_shuffle_ps(_mm256_loadu_ps(at), _mm256_loadu_ps(at + 8), 0x88);
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8));
    }
    return _mm256_i32gather_ps(at, idx, 4);
}

void forward_plane(const float* xp, const float* w, float b, const Conv2dGeometry& g,
                   const Padded& p, float* out) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32(static_cast<int>(g.sw)));
    const __m256 bias = _mm256_set1_ps(b);
    for (int64_t oy = 0; oy < p.oh; ++oy) {
        const float* rows = xp + oy * g.sh * p.wp;
        float* o = out + oy * p.ow;
        int64_t ox = 0;
        for (; ox + 16 <= p.ow; ox += 16) {
            __m256 a0 = bias, a1 = bias;
            for (int64_t i = 0; i < g.kh; ++i) {
                const float* r = rows + i * g.dh * p.wp + ox * g.sw;
                for (int64_t j = 0; j < g.kw; ++j) {
                    const __m256 wv = _mm256_broadcast_ss(w + i * g.kw + j);
                    a0 = _mm256_fmadd_ps(wv, tap8(r + j * g.dw, g.sw, idx), a0);
                    a1 = _mm256_fmadd_ps(wv, tap8(r + j * g.dw + 8 * g.sw, g.sw, idx), a1);
                }
            }
            _mm256_storeu_ps(o + ox, a0);
            _mm256_storeu_ps(o + ox + 8, a1);
        }
        for (; ox < p.ow; ox += 8) {
            __m256 a0 = bias;
            for (int64_t i = 0; i < g.kh; ++i) {
                const float* r = rows + i * g.dh * p.wp + ox * g.sw;
                for (int64_t j = 0; j < g.kw; ++j)
                    a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(w + i * g.kw + j),
                                         tap8(r + j * g.dw, g.sw, idx), a0);
            }
            if (ox + 8 <= p.ow) {
                _mm256_storeu_ps(o + ox, a0);
            } else {
                alignas(32) float tail[8];
                _mm256_store_ps(tail, a0);
                for (int64_t l = 0; ox + l < p.ow; ++l) o[ox + l] = tail[l];
            }
        }
    }
}

}  // namespace

void depthwise_forward_avx2(const float* x, const float* w, const float* bias,
                            const Conv2dGeometry& g, float* out) {
    if (depthwise_lanes_forward_avx2(x, w, bias, g, out)) return;
    const Padded p = padded_size(g);
    if (p.oh <= 0 || p.ow <= 0) return;
    const int64_t in_plane = g.h * g.w, out_plane = p.oh * p.ow, k = g.kh * g.kw;
    const bool parallel = g.n * g.c * out_plane * k >= kDwParallelMin;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t plane = 0; plane < g.n * g.c; ++plane) {
        const int64_t c = plane % g.c;
        float* xp = scratch(p.hp * p.wp);
        pad_plane(x + plane * in_plane, g, p, xp);
        forward_plane(xp, w + c * k, bias ? bias[c] : 0.0f, g, p, out + plane * out_plane);
    }
}

// Stride 1: the input gradient is the forward of gy with the kernel flipped, padded so that
// the output is the input's size (tap (i, j) of gx[y][x] reads gy[y + pt - i * dh][...]).
// Padding past a kernel's reach (pt > (kh - 1) * dh) would need a negative padding: rows.
void depthwise_backward_input_avx2(const float* gy, const float* w, const Conv2dGeometry& g,
                                   float* gx) {
    if (depthwise_lanes_backward_input_avx2(gy, w, g, gx)) return;
    const int64_t reach_h = (g.kh - 1) * g.dh, reach_w = (g.kw - 1) * g.dw;
    if (g.sh != 1 || g.sw != 1 || g.pt > reach_h || g.pb > reach_h || g.pl > reach_w ||
        g.pr > reach_w) {
        return dw_backward_input<float, Avx2Rows>(gy, w, g, gx);
    }
    const Conv2dGeometry t{g.n,  g.c,  g.out_h(), g.out_w(), g.kh, g.kw, 1, 1,
                           reach_h - g.pt, reach_h - g.pb, reach_w - g.pl, reach_w - g.pr,
                           g.dh, g.dw};
    const int64_t k = g.kh * g.kw;
    float* flipped = new float[static_cast<size_t>(g.c * k)];
    for (int64_t c = 0; c < g.c; ++c)
        for (int64_t i = 0; i < k; ++i) flipped[c * k + i] = w[c * k + k - 1 - i];
    depthwise_forward_avx2(gy, flipped, nullptr, t, gx);
    delete[] flipped;
}

void depthwise_backward_weight_avx2(const float* x, const float* gy, const Conv2dGeometry& g,
                                    float* gw) {
    if (depthwise_lanes_backward_weight_avx2(x, gy, g, gw)) return;
    dw_backward_weight<float, Avx2Rows>(x, gy, g, gw);
}

}  // namespace tianyuan
