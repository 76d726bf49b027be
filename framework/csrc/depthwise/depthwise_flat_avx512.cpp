// AVX-512 depthwise kernels on flat plans, float32 (the entry points' contract is
// depthwise.h's): an output plane up to 128x128 with a kernel up to 5x5 is one flat run of
// positions, 16 a step, each tap's reads worked out once per call (FlatPlan). The forward
// and the weight gradient run on it; the stride-1 input gradient is the forward of gy with
// the flipped kernel, the stride-2 one a sum per quarter of the plane (QuadGrad).
#include <immintrin.h>

#include <cstdint>

#include "depthwise/depthwise.h"
#include "depthwise/depthwise_impl.h"

namespace tianyuan {
namespace {

inline __mmask16 low_bits(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// The output plane as one flat run of positions, 16 a step, each tap's reads worked out once
// per call: a lane mask per step and tap, plus a constant offset when stride 1 keeps the rows
// aligned (out_w == w), else gather offsets. A 7x7 map fills 49 of 64 lanes instead of 7 of
// 16 per row, and no tap recomputes its column range per row (bench/RESULTS.md, fp32
// kernels: depthwise).
constexpr int64_t kFlatMaxPlane = 1 << 14, kFlatMaxTaps = 25;

// No STL in an ISA translation unit: its template instances compiled with AVX-512 flags
// could be the ones the linker keeps for every other unit.
struct FlatPlan {
    int64_t chunks = 0, taps = 0;
    bool aligned = false;          // tap t reads x + p + shift[t]
    // Stride 2, no dilation, out_w == ceil(w / 2): the plane is read as its four quarters
    // (even/odd rows x even/odd columns, each qh x qw with qw == out_w), where tap t is a
    // unit-stride read of quarter[t] at p + shift[t]: no gathers.
    bool quad = false;
    int64_t qh = 0, qw = 0;
    int64_t shift[kFlatMaxTaps];
    int64_t quarter[kFlatMaxTaps];
    __mmask16* mask = nullptr;     // (chunks, taps): lanes whose input exists
    int32_t* offset = nullptr;     // (chunks, taps, 16) gather offsets unless aligned / quad
    FlatPlan() = default;
    ~FlatPlan() {
        delete[] mask;
        delete[] offset;
    }
    FlatPlan(const FlatPlan&) = delete;
    FlatPlan& operator=(const FlatPlan&) = delete;
};

// floor(v / 2), negative v too
inline int64_t half_down(int64_t v) { return v >= 0 ? v / 2 : -((1 - v) / 2); }

void flat_plan(const Conv2dGeometry& g, FlatPlan* f) {
    const int64_t oh = g.out_h(), ow = g.out_w();
    f->chunks = (oh * ow + 15) / 16;
    f->taps = g.kh * g.kw;
    f->aligned = g.sh == 1 && g.sw == 1 && ow == g.w;
    f->quad = g.sh == 2 && g.sw == 2 && g.dh == 1 && g.dw == 1 && ow == (g.w + 1) / 2;
    f->qh = (g.h + 1) / 2;
    f->qw = (g.w + 1) / 2;
    f->mask = new __mmask16[f->chunks * f->taps]();
    if (!f->aligned && !f->quad) f->offset = new int32_t[f->chunks * f->taps * 16]();
    for (int64_t t = 0; t < f->taps; ++t) {
        const int64_t di = (t / g.kw) * g.dh - g.pt, dj = (t % g.kw) * g.dw - g.pl;
        f->shift[t] = di * g.w + dj;
        if (f->quad) {  // input (2 oy + di, 2 ox + dj) lies in quarter (di & 1, dj & 1)
            const int64_t ri = half_down(di), rj = half_down(dj);
            f->quarter[t] = (di - 2 * ri) * 2 + (dj - 2 * rj);
            f->shift[t] = ri * f->qw + rj;
        }
        const TapRange cols = tap_range(dj, g.sw, g.w, ow);
        for (int64_t oy = 0; oy < oh; ++oy) {
            const int64_t iy = oy * g.sh + di;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t ox = cols.lo, p = oy * ow + cols.lo; ox < cols.hi; ++ox, ++p) {
                const int64_t e = (p >> 4) * f->taps + t;
                f->mask[e] |= __mmask16(1u << (p & 15));
                if (f->offset) f->offset[e * 16 + (p & 15)] = int32_t(iy * g.w + ox * g.sw + dj);
            }
        }
    }
}

// A plane (h, w) as the four quarters of a quad plan, each (qh, qw), at q (4 * qh * qw).
void quarters(const float* x, const Conv2dGeometry& g, const FlatPlan& f, float* q) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const int64_t size = f.qh * f.qw;
    for (int64_t y = 0; y < g.h; ++y) {
        const float* row = x + y * g.w;
        float* e = q + (y & 1) * 2 * size + (y >> 1) * f.qw;  // quarter (y & 1, 0)
        float* o = e + size;                                   // quarter (y & 1, 1)
        for (int64_t c = 0; c < g.w; c += 32) {
            const __m512 x0 = _mm512_maskz_loadu_ps(low_bits(g.w - c), row + c);
            const __m512 x1 = _mm512_maskz_loadu_ps(low_bits(g.w - c - 16), row + c + 16);
            const int64_t k = c / 2;
            _mm512_mask_storeu_ps(e + k, low_bits((g.w + 1) / 2 - k),
                                  _mm512_permutex2var_ps(x0, even, x1));
            _mm512_mask_storeu_ps(o + k, low_bits(g.w / 2 - k),
                                  _mm512_permutex2var_ps(x0, odd, x1));
        }
    }
}

// Where a plan's tap reads come from for one plane: the plane itself, or (quad) its quarters
// written into `space` (4 * qh * qw floats, one per thread).
inline const float* tap_source(const FlatPlan& f, const float* x, const Conv2dGeometry& g,
                               float* space) {
    if (!f.quad) return x;
    quarters(x, g, f, space);
    return space;
}

// Step q's inputs of tap t from plane x (its quarters for a quad plan), 0 in the lanes
// outside mask m.
inline __m512 tap_read(const FlatPlan& f, const float* x, int64_t q, int64_t t, __mmask16 m) {
    if (f.aligned) return _mm512_maskz_loadu_ps(m, x + 16 * q + f.shift[t]);
    if (f.quad) {
        return _mm512_maskz_loadu_ps(m, x + f.quarter[t] * f.qh * f.qw + 16 * q + f.shift[t]);
    }
    const __m512i at = _mm512_loadu_si512(f.offset + (q * f.taps + t) * 16);
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at, x, 4);
}

void forward_flat_plane(const float* x, const float* w, float b, const FlatPlan& f,
                        int64_t plane, float* out) {
    for (int64_t q = 0; q < f.chunks; ++q) {
        __m512 acc = _mm512_set1_ps(b);
        const __mmask16* m = f.mask + q * f.taps;
        for (int64_t t = 0; t < f.taps; ++t) {
            if (!m[t]) continue;
            acc = _mm512_fmadd_ps(_mm512_set1_ps(w[t]), tap_read(f, x, q, t, m[t]), acc);
        }
        _mm512_mask_storeu_ps(out + 16 * q, low_bits(plane - 16 * q), acc);
    }
}

void forward_flat(const float* x, const float* w, const float* bias, const Conv2dGeometry& g,
                  float* out) {
    FlatPlan f;
    flat_plan(g, &f);
    const int64_t in_plane = g.h * g.w, plane = g.out_h() * g.out_w();
    const bool parallel = g.n * g.c * plane * f.taps >= kDwParallelMin;
#pragma omp parallel if (parallel)
    {
        float* space = f.quad ? new float[4 * f.qh * f.qw]() : nullptr;
#pragma omp for schedule(static)
        for (int64_t p = 0; p < g.n * g.c; ++p) {
            const int64_t c = p % g.c;
            forward_flat_plane(tap_source(f, x + p * in_plane, g, space), w + c * f.taps,
                               bias ? bias[c] : 0.0f, f, plane, out + p * plane);
        }
        delete[] space;
    }
}

bool flat_fits(const Conv2dGeometry& g) {
    return g.out_h() * g.out_w() <= kFlatMaxPlane && g.kh * g.kw <= kFlatMaxTaps &&
           g.h * g.w < (int64_t(1) << 31);
}

// Stride 1: the input gradient is the forward of gy with the kernel flipped and padding
// d * (k - 1) - p per side (which must be >= 0), so it runs on the flat forward.
bool backward_input_as_forward(const float* gy, const float* w, const Conv2dGeometry& g,
                               float* gx) {
    const int64_t rh = g.dh * (g.kh - 1), rw = g.dw * (g.kw - 1);
    if (g.sh != 1 || g.sw != 1 || g.pt > rh || g.pb > rh || g.pl > rw || g.pr > rw) return false;
    Conv2dGeometry a = g;
    a.h = g.out_h();
    a.w = g.out_w();
    a.pt = rh - g.pt, a.pb = rh - g.pb, a.pl = rw - g.pl, a.pr = rw - g.pr;
    if (!flat_fits(a)) return false;
    const int64_t k = g.kh * g.kw;
    float* flipped = new float[g.c * k];
    for (int64_t c = 0; c < g.c; ++c)
        for (int64_t t = 0; t < k; ++t) flipped[c * k + t] = w[c * k + k - 1 - t];
    forward_flat(gy, flipped, nullptr, a, gx);
    delete[] flipped;
    return true;
}

// Stride-2 input gradient on a quad plan: position (r, c) of quarter Q of gx sums
// w[t] * gy[r - ri_t][c - rj_t] over the taps t that read quarter Q, and since out_w == qw
// that is a unit-stride read of gy at p - shift[t]; the four quarters are then interleaved
// back into the plane. mask (4, chunks, taps): lanes whose gy position exists.
struct QuadGrad {
    int64_t chunks = 0;
    int64_t ntaps[4] = {0, 0, 0, 0};   // the taps that read quarter Q: tap[Q][0 .. ntaps[Q])
    int64_t tap[4][kFlatMaxTaps];
    __mmask16* mask = nullptr;
    QuadGrad() = default;
    ~QuadGrad() { delete[] mask; }
    QuadGrad(const QuadGrad&) = delete;
    QuadGrad& operator=(const QuadGrad&) = delete;
};

void quad_grad_plan(const Conv2dGeometry& g, const FlatPlan& f, QuadGrad* q) {
    const int64_t oh = g.out_h(), ow = g.out_w(), size = f.qh * f.qw;
    q->chunks = (size + 15) / 16;
    q->mask = new __mmask16[4 * q->chunks * f.taps]();
    for (int64_t t = 0; t < f.taps; ++t) {
        q->tap[f.quarter[t]][q->ntaps[f.quarter[t]]++] = t;
        const int64_t a = f.quarter[t] / 2, b = f.quarter[t] % 2;
        const int64_t ri = half_down((t / g.kw) - g.pt), rj = half_down((t % g.kw) - g.pl);
        for (int64_t p = 0; p < size; ++p) {
            const int64_t r = p / f.qw, c = p % f.qw, y = r - ri, x = c - rj;
            const bool in = 2 * r + a < g.h && 2 * c + b < g.w && y >= 0 && y < oh && x >= 0 &&
                            x < ow;
            if (in) q->mask[(f.quarter[t] * q->chunks + p / 16) * f.taps + t] |= 1u << (p % 16);
        }
    }
}

// The four quarters at q (each qh x qw) interleaved back into a plane (h, w).
void interleave(const float* q, const Conv2dGeometry& g, const FlatPlan& f, float* x) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7,
                                         23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    const int64_t size = f.qh * f.qw;
    for (int64_t y = 0; y < g.h; ++y) {
        const float* e = q + (y & 1) * 2 * size + (y >> 1) * f.qw;
        const float* o = e + size;
        float* row = x + y * g.w;
        for (int64_t c = 0; c < g.w; c += 32) {
            const int64_t k = c / 2;
            const __m512 ev = _mm512_maskz_loadu_ps(low_bits((g.w + 1) / 2 - k), e + k);
            const __m512 ov = _mm512_maskz_loadu_ps(low_bits(g.w / 2 - k), o + k);
            _mm512_mask_storeu_ps(row + c, low_bits(g.w - c), _mm512_permutex2var_ps(ev, lo, ov));
            _mm512_mask_storeu_ps(row + c + 16, low_bits(g.w - c - 16),
                                  _mm512_permutex2var_ps(ev, hi, ov));
        }
    }
}

void quad_grad_plane(const float* gy, const float* w, const Conv2dGeometry& g,
                     const FlatPlan& f, const QuadGrad& q, float* space, float* gx) {
    const int64_t size = f.qh * f.qw;
    for (int64_t quarter = 0; quarter < 4; ++quarter) {
        float* out = space + quarter * size;
        for (int64_t k = 0; k < q.chunks; ++k) {
            const __mmask16* m = q.mask + (quarter * q.chunks + k) * f.taps;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t u = 0; u < q.ntaps[quarter]; ++u) {
                const int64_t t = q.tap[quarter][u];
                const __m512 v = _mm512_maskz_loadu_ps(m[t], gy + 16 * k - f.shift[t]);
                acc = _mm512_fmadd_ps(_mm512_set1_ps(w[t]), v, acc);
            }
            _mm512_mask_storeu_ps(out + 16 * k, low_bits(size - 16 * k), acc);
        }
    }
    interleave(space, g, f, gx);
}

// Planes up to 64x64: the quarters stay in L1 between the sums and the interleave (larger
// planes: the row kernel is faster).
constexpr int64_t kQuadGradMaxPlane = 64 * 64;

bool backward_input_quad(const float* gy, const float* w, const Conv2dGeometry& g, float* gx) {
    if (!flat_fits(g) || g.h * g.w > kQuadGradMaxPlane) return false;
    FlatPlan f;
    flat_plan(g, &f);
    if (!f.quad) return false;
    QuadGrad q;
    quad_grad_plan(g, f, &q);
    const int64_t in_plane = g.h * g.w, plane = g.out_h() * g.out_w();
    const bool parallel = g.n * g.c * plane * f.taps >= kDwParallelMin;
#pragma omp parallel if (parallel)
    {
        float* space = new float[4 * f.qh * f.qw + 16]();
#pragma omp for schedule(static)
        for (int64_t p = 0; p < g.n * g.c; ++p) {
            quad_grad_plane(gy + p * plane, w + p % g.c * f.taps, g, f, q, space,
                            gx + p * in_plane);
        }
        delete[] space;
    }
    return true;
}

// gw[c][t] for one channel c: the sum over images and positions of gy * x at tap t.
void weight_grad_channel(const float* x, const float* gy, const Conv2dGeometry& g,
                         const FlatPlan& f, int64_t c, float* space, float* gw) {
    const int64_t in_plane = g.h * g.w, plane = g.out_h() * g.out_w();
    __m512 acc[kFlatMaxTaps];
    for (int64_t t = 0; t < f.taps; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t n = 0; n < g.n; ++n) {
        const float* xp = tap_source(f, x + (n * g.c + c) * in_plane, g, space);
        const float* gp = gy + (n * g.c + c) * plane;
        for (int64_t q = 0; q < f.chunks; ++q) {
            const __m512 gv = _mm512_maskz_loadu_ps(low_bits(plane - 16 * q), gp + 16 * q);
            const __mmask16* m = f.mask + q * f.taps;
            for (int64_t t = 0; t < f.taps; ++t) {
                if (!m[t]) continue;
                acc[t] = _mm512_fmadd_ps(tap_read(f, xp, q, t, m[t]), gv, acc[t]);
            }
        }
    }
    for (int64_t t = 0; t < f.taps; ++t) gw[c * f.taps + t] = _mm512_reduce_add_ps(acc[t]);
}

// gw (C, taps) on the forward's flat plan, channels in parallel.
void backward_weight_flat(const float* x, const float* gy, const Conv2dGeometry& g,
                          float* gw) {
    FlatPlan f;
    flat_plan(g, &f);
    const bool parallel = g.n * g.c * g.out_h() * g.out_w() * f.taps >= kDwParallelMin;
#pragma omp parallel if (parallel)
    {
        float* space = f.quad ? new float[4 * f.qh * f.qw]() : nullptr;
#pragma omp for schedule(static)
        for (int64_t c = 0; c < g.c; ++c) weight_grad_channel(x, gy, g, f, c, space, gw);
        delete[] space;
    }
}

}  // namespace

bool depthwise_flat_forward_avx512(const float* x, const float* w, const float* bias,
                                   const Conv2dGeometry& g, float* out) {
    if (!flat_fits(g)) return false;
    forward_flat(x, w, bias, g, out);
    return true;
}

bool depthwise_flat_backward_input_avx512(const float* gy, const float* w,
                                          const Conv2dGeometry& g, float* gx) {
    return backward_input_as_forward(gy, w, g, gx) || backward_input_quad(gy, w, g, gx);
}

bool depthwise_flat_backward_weight_avx512(const float* x, const float* gy,
                                           const Conv2dGeometry& g, float* gw) {
    if (!flat_fits(g)) return false;
    backward_weight_flat(x, gy, g, gw);
    return true;
}

}  // namespace tianyuan
