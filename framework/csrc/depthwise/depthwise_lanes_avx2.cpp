// AVX2 depthwise kernels, float32, with the channels in the lanes (the int8 kernel's scheme,
// int8_depthwise_lanes_avx2.cpp): per image and block of 8 channels, 8 x 8 transposes turn the
// 8 input planes into one zero-padded position-major plane (8 floats, the block's channels,
// per position). The forward: each output position's 8 channels are one vector, the bias and
// then every tap's FMA in row-major order, as the plane kernel's lanes add them (the same
// bits), transposed back into the NCHW rows. The weight gradient: one FMA per tap and output
// position into a block's 8-channel sums. The strided input gradient: each input position
// sums the taps that reach it. The plane and row kernels (depthwise_avx2.cpp) pad every
// (image, channel) plane and run a step of 8 lanes per row: on 7x7 and 14x14 maps set-up
// and idle lanes. No STL in an ISA translation unit.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <new>

#include <omp.h>

#include "depthwise/depthwise.h"
#include "depthwise/depthwise_impl.h"
#include "conv/transpose_avx2.h"

namespace tianyuan {
namespace {

constexpr int64_t kMaxTaps = 25;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// Grow-only per-thread scratch (64-byte aligned).
float* lane_scratch(int64_t n) {
    static thread_local float* buf = nullptr;
    static thread_local int64_t size = 0;
    if (size < n) {
        ::operator delete[](buf, std::align_val_t(64));
        buf = static_cast<float*>(::operator new[](static_cast<size_t>(n) * sizeof(float),
                                                   std::align_val_t(64)));
        size = n;
    }
    return buf;
}

// 8 planes of hw floats (x + rows[i]) into the position-major plane xt: input position
// (y, c) at float ((y + pt) * wp + c + pl) * 8, its 8 channels in order. Reads stop at x's
// float `size`.
void to_lanes(const float* x, const int64_t* rows, int64_t size, const Conv2dGeometry& g,
              int64_t wp, float* xt) {
    const int64_t hw = g.h * g.w;
    int64_t y = 0, c = 0;  // position q's row and column
    for (int64_t q = 0; q < hw; q += 8) {
        __m256 v[8];
        for (int i = 0; i < 8; ++i) {
            const int64_t from = rows[i] + q;
            if (from + 8 <= size) {
                v[i] = _mm256_loadu_ps(x + from);
            } else {  // the tensor's last floats: no read past them
                alignas(32) float tmp[8] = {};
                std::memcpy(tmp, x + from, static_cast<size_t>(size - from) * sizeof(float));
                v[i] = _mm256_load_ps(tmp);
            }
        }
        transpose8(v);  // v[k]: position q + k
        for (int k = 0; k < 8 && q + k < hw; ++k) {
            _mm256_storeu_ps(xt + ((y + g.pt) * wp + c + g.pl) * 8, v[k]);
            if (++c == g.w) c = 0, ++y;
        }
    }
}

// The position-major outputs ot (p, 8), readable 8 positions past p, into the first nc of
// 8 NCHW rows of p floats from out.
void from_lanes(const float* ot, int64_t p, int64_t nc, float* out) {
    for (int64_t o = 0; o < p; o += 8) {
        __m256 v[8];
        for (int i = 0; i < 8; ++i) v[i] = _mm256_load_ps(ot + (o + i) * 8);
        transpose8(v);  // v[k]: channel k's positions o .. o + 7
        const int64_t n = min64(8, p - o);
        for (int64_t k = 0; k < nc; ++k) {
            if (n == 8) {
                _mm256_storeu_ps(out + k * p + o, v[k]);
                continue;
            }
            alignas(32) float tmp[8];
            _mm256_store_ps(tmp, v[k]);
            for (int64_t l = 0; l < n; ++l) out[k * p + o + l] = tmp[l];
        }
    }
}

template <int Taps>
void positions(const float* xt, const Conv2dGeometry& g, int64_t wp, const int64_t* off,
               int64_t taps, const __m256* wv, __m256 bias, float* ot) {
    const int64_t n = Taps ? Taps : taps, oh = g.out_h(), ow = g.out_w();
    for (int64_t oy = 0; oy < oh; ++oy) {
        const float* row = xt + oy * g.sh * wp * 8;
        for (int64_t ox = 0; ox < ow; ++ox) {
            const float* base = row + ox * g.sw * 8;
            __m256 acc = bias;
#pragma GCC unroll 25
            for (int64_t t = 0; t < n; ++t) {
                acc = _mm256_fmadd_ps(wv[t], _mm256_loadu_ps(base + off[t]), acc);
            }
            _mm256_store_ps(ot + (oy * ow + ox) * 8, acc);
        }
    }
}

// Block of 8 channels: the weight gradient's sums over one image's output positions,
// acc[t] += gy * x at tap t, gy position-major at gt.
template <int Taps>
void weight_sums(const float* xt, const float* gt, const Conv2dGeometry& g, int64_t wp,
                 const int64_t* off, int64_t taps, __m256* acc) {
    const int64_t n = Taps ? Taps : taps, oh = g.out_h(), ow = g.out_w();
    for (int64_t oy = 0; oy < oh; ++oy) {
        const float* row = xt + oy * g.sh * wp * 8;
        for (int64_t ox = 0; ox < ow; ++ox) {
            const float* base = row + ox * g.sw * 8;
            const __m256 gv = _mm256_load_ps(gt + (oy * ow + ox) * 8);
#pragma GCC unroll 25
            for (int64_t t = 0; t < n; ++t) {
                acc[t] = _mm256_fmadd_ps(gv, _mm256_loadu_ps(base + off[t]), acc[t]);
            }
        }
    }
}

// Where the channels-in-lanes kernels pay: blocks of 8 channels; the forward on small maps or
// at stride 2 (at stride 1 from 56x56 the plane kernel's rows fill its lanes), the weight
// gradient everywhere (bench/RESULTS.md, training).
bool lanes_pay(const Conv2dGeometry& g, bool forward) {
    return g.c >= 8 && g.kh * g.kw <= kMaxTaps && g.out_h() > 0 && g.out_w() > 0 &&
           (!forward || g.sw >= 2 || g.out_h() * g.out_w() <= 28 * 28);
}

// The taps of one input row (or column) v that a strided output reaches: kernel index k
// with (v + pad - k * dil) divisible by the stride, and the output index it comes from,
// offset by the border of the padded gy plane. At most kMaxTaps per index.
struct Reach {
    int64_t count;
    int64_t k[kMaxTaps], from[kMaxTaps];
};

void reach_of(int64_t v, int64_t pad, int64_t kn, int64_t dil, int64_t stride, int64_t border,
              Reach* r) {
    r->count = 0;
    for (int64_t k = 0; k < kn; ++k) {
        const int64_t u = v + pad - k * dil;
        if (u >= 0 ? u % stride != 0 : (-u) % stride != 0) continue;
        r->k[r->count] = k;
        r->from[r->count++] = (u >= 0 ? u / stride : -((-u) / stride)) + border;
    }
}

}  // namespace

bool depthwise_lanes_backward_input_avx2(const float* gy, const float* w,
                                         const Conv2dGeometry& g, float* gx) {
    if (g.sh < 2 && g.sw < 2) return false;  // stride 1: the forward of gy (flipped kernel)
    if (!lanes_pay(g, true) || g.n * ((g.c + 7) / 8) < omp_get_max_threads()) return false;
    const int64_t oh = g.out_h(), ow = g.out_w(), p = oh * ow, taps = g.kh * g.kw;
    const int64_t blocks = (g.c + 7) / 8, hw = g.h * g.w;
    // gy's planes padded with zeros so that every reaching tap reads inside: output rows
    // (y + pt - i * dh) / sh from -bt to oh - 1 + bb, columns likewise
    const int64_t bt = ((g.kh - 1) * g.dh + g.sh - 1) / g.sh;
    const int64_t bl = ((g.kw - 1) * g.dw + g.sw - 1) / g.sw;
    const int64_t bb = max64(0, (g.h - 1 + g.pt) / g.sh - (oh - 1));
    const int64_t br = max64(0, (g.w - 1 + g.pl) / g.sw - (ow - 1));
    const int64_t gh = bt + oh + bb, gwp = bl + ow + br;
    Reach* rows_of = new Reach[g.h];
    Reach* cols_of = new Reach[g.w];
    for (int64_t y = 0; y < g.h; ++y) reach_of(y, g.pt, g.kh, g.dh, g.sh, bt, rows_of + y);
    for (int64_t x = 0; x < g.w; ++x) reach_of(x, g.pl, g.kw, g.dw, g.sw, bl, cols_of + x);
    Conv2dGeometry go = g;  // gy as an input padded by the border
    go.h = oh, go.w = ow, go.pt = bt, go.pl = bl;
    const int64_t gt_floats = gh * gwp * 8, gsize = g.n * g.c * p;
#pragma omp parallel if (g.n * g.c * p * taps >= kDwParallelMin)
    {
        float* gt = lane_scratch(gt_floats + (hw + 8) * 8);
        float* xt = gt + gt_floats;
        for (int64_t k = 0; k < gt_floats; ++k) gt[k] = 0.0f;  // the border, kept by all
#pragma omp for schedule(static)
        for (int64_t task = 0; task < g.n * blocks; ++task) {
            const int64_t n = task / blocks, c0 = task % blocks * 8, nc = min64(8, g.c - c0);
            int64_t grows[8];
            for (int i = 0; i < 8; ++i) grows[i] = (n * g.c + c0 + min64(i, nc - 1)) * p;
            to_lanes(gy, grows, gsize, go, gwp, gt);
            alignas(32) float wt[kMaxTaps][8];
            for (int i = 0; i < 8; ++i) {
                const int64_t c = c0 + min64(i, nc - 1);
                for (int64_t t = 0; t < taps; ++t) wt[t][i] = w[c * taps + t];
            }
            for (int64_t y = 0; y < g.h; ++y) {
                const Reach& ry = rows_of[y];
                for (int64_t x = 0; x < g.w; ++x) {
                    const Reach& rx = cols_of[x];
                    __m256 acc = _mm256_setzero_ps();
                    for (int64_t a = 0; a < ry.count; ++a) {
                        const float* src = gt + ry.from[a] * gwp * 8;
                        const float* wr = wt[ry.k[a] * g.kw];
                        for (int64_t b = 0; b < rx.count; ++b) {
                            acc = _mm256_fmadd_ps(_mm256_load_ps(wr + rx.k[b] * 8),
                                                  _mm256_loadu_ps(src + rx.from[b] * 8), acc);
                        }
                    }
                    _mm256_store_ps(xt + (y * g.w + x) * 8, acc);
                }
            }
            from_lanes(xt, hw, nc, gx + (n * g.c + c0) * hw);
        }
    }
    delete[] rows_of;
    delete[] cols_of;
    return true;
}

bool depthwise_lanes_backward_weight_avx2(const float* x, const float* gy,
                                          const Conv2dGeometry& g, float* gw) {
    if (!lanes_pay(g, false)) return false;
    const int64_t oh = g.out_h(), ow = g.out_w(), p = oh * ow, taps = g.kh * g.kw;
    const int64_t blocks = (g.c + 7) / 8;
    const int64_t wp = g.w + g.pl + g.pr, hp = g.h + g.pt + g.pb, hw = g.h * g.w;
    int64_t off[kMaxTaps];
    for (int64_t t = 0; t < taps; ++t) off[t] = (t / g.kw * g.dh * wp + t % g.kw * g.dw) * 8;
    Conv2dGeometry go = g;  // gy's planes as an unpadded input: position o at float o * 8
    go.h = oh, go.w = ow, go.pt = go.pb = go.pl = go.pr = 0;
    const int64_t xt_floats = hp * wp * 8, size = g.n * g.c * hw, gsize = g.n * g.c * p;
#pragma omp parallel if (g.n * g.c * p * taps >= kDwParallelMin)
    {
        float* xt = lane_scratch(xt_floats + (p + 8) * 8);
        float* gt = xt + xt_floats;
        for (int64_t k = 0; k < xt_floats; ++k) xt[k] = 0.0f;  // the border, kept by all
#pragma omp for schedule(static)
        for (int64_t block = 0; block < blocks; ++block) {
            const int64_t c0 = block * 8, nc = min64(8, g.c - c0);
            __m256 acc[kMaxTaps];
            for (int64_t t = 0; t < taps; ++t) acc[t] = _mm256_setzero_ps();
            for (int64_t n = 0; n < g.n; ++n) {  // images in order: bits whatever the threads
                int64_t rows[8], grows[8];
                for (int i = 0; i < 8; ++i) {
                    const int64_t plane = n * g.c + c0 + min64(i, nc - 1);
                    rows[i] = plane * hw;
                    grows[i] = plane * p;
                }
                to_lanes(x, rows, size, g, wp, xt);
                to_lanes(gy, grows, gsize, go, ow, gt);
                if (taps == 9) {
                    weight_sums<9>(xt, gt, g, wp, off, taps, acc);
                } else {
                    weight_sums<0>(xt, gt, g, wp, off, taps, acc);
                }
            }
            for (int64_t t = 0; t < taps; ++t) {
                alignas(32) float sums[8];
                _mm256_store_ps(sums, acc[t]);
                for (int64_t i = 0; i < nc; ++i) gw[(c0 + i) * taps + t] = sums[i];
            }
        }
    }
    return true;
}

bool depthwise_lanes_forward_avx2(const float* x, const float* w, const float* bias,
                                  const Conv2dGeometry& g, float* out) {
    const int64_t oh = g.out_h(), ow = g.out_w(), p = oh * ow, taps = g.kh * g.kw;
    const int64_t blocks = (g.c + 7) / 8;
    if (!lanes_pay(g, true) || g.n * blocks < omp_get_max_threads()) return false;
    const int64_t wp = g.w + g.pl + g.pr, hp = g.h + g.pt + g.pb, hw = g.h * g.w;
    int64_t off[kMaxTaps];
    for (int64_t t = 0; t < taps; ++t) off[t] = (t / g.kw * g.dh * wp + t % g.kw * g.dw) * 8;
    const int64_t xt_floats = hp * wp * 8, size = g.n * g.c * hw;
#pragma omp parallel if (g.n * g.c * p * taps >= kDwParallelMin)
    {
        float* xt = lane_scratch(xt_floats + (p + 8) * 8);
        float* ot = xt + xt_floats;  // xt_floats is a multiple of 8: ot stays 32-byte aligned
        for (int64_t k = 0; k < xt_floats; ++k) xt[k] = 0.0f;  // the border, kept by all
#pragma omp for schedule(static)
        for (int64_t task = 0; task < g.n * blocks; ++task) {
            const int64_t n = task / blocks, c0 = task % blocks * 8, nc = min64(8, g.c - c0);
            int64_t rows[8];  // a part-filled block repeats its last plane
            for (int i = 0; i < 8; ++i) rows[i] = (n * g.c + c0 + min64(i, nc - 1)) * hw;
            to_lanes(x, rows, size, g, wp, xt);
            alignas(32) float wt[kMaxTaps][8], b[8];
            for (int i = 0; i < 8; ++i) {
                const int64_t c = c0 + min64(i, nc - 1);
                for (int64_t t = 0; t < taps; ++t) wt[t][i] = w[c * taps + t];
                b[i] = bias ? bias[c] : 0.0f;
            }
            __m256 wv[kMaxTaps];
            for (int64_t t = 0; t < taps; ++t) wv[t] = _mm256_load_ps(wt[t]);
            const __m256 bv = _mm256_load_ps(b);
            if (taps == 9) {
                positions<9>(xt, g, wp, off, taps, wv, bv, ot);
            } else {
                positions<0>(xt, g, wp, off, taps, wv, bv, ot);
            }
            from_lanes(ot, p, nc, out + (n * g.c + c0) * p);
        }
    }
    return true;
}

}  // namespace tianyuan
