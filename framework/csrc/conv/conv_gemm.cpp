// Direct GEMM convolution (conv_gemm.h): panel packing from the image, the OpenMP driver,
// the generic register-block kernel and the ISA dispatch.
#include "conv/conv_gemm.h"

#include <omp.h>

#include <cstddef>
#include <memory>
#include <stdexcept>

#include "conv/conv_gemm_plans.h"
#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace conv_gemm_detail {
namespace {

constexpr int64_t kNr = kConvGemmNr, kMr = kConvGemmMr, kKc = kConvGemmKc;
constexpr int64_t kGroup = 8;  // panels per work item (their output tile stays in L2)
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelMacs = 1 << 20;

using Segment = ConvGemmSegment;

// d[t] = row[(ox0 + t) * sw + off] for t < len, 0 where that column is outside [0, w).
void gather_segment(const float* row, int64_t w, int64_t ox0, int64_t len, int64_t sw,
                    int64_t off, float* d) {
    int64_t lo = 0, hi = len;  // lanes whose column is inside the row
    while (lo < hi && (ox0 + lo) * sw + off < 0) ++lo;
    while (hi > lo && (ox0 + hi - 1) * sw + off >= w) --hi;
    for (int64_t t = 0; t < lo; ++t) d[t] = 0.0f;
    const float* src = row + (ox0 + lo) * sw + off;  // inside the row when lo < hi
    if (sw == 1) {
        for (int64_t t = lo; t < hi; ++t) d[t] = src[t - lo];
    } else {
        for (int64_t t = lo; t < hi; ++t) d[t] = src[(t - lo) * sw];
    }
    for (int64_t t = hi; t < len; ++t) d[t] = 0.0f;
}

// panel[kk][lane] = X_n[k0 + kk][p0 + lane] for kk < kc, lanes >= nvalid zero.
void pack_generic(const float* xn, const Conv2dGeometry& g, const Segment* seg, int64_t nseg,
                  int64_t nvalid, int64_t k0, int64_t kc, float* panel) {
    const int64_t khw = g.kh * g.kw;
    int64_t c = k0 / khw, i = (k0 % khw) / g.kw, j = k0 % g.kw;  // row k = (c * kh + i) * kw + j
    for (int64_t kk = 0; kk < kc; ++kk, ++j) {
        if (j == g.kw) {
            j = 0;
            if (++i == g.kh) i = 0, ++c;
        }
        float* dst = panel + kk * kNr;
        for (int64_t s = 0; s < nseg; ++s) {
            const float* plane = xn + (seg[s].n * g.c + c) * g.h * g.w;
            float* d = dst + seg[s].lane;
            const int64_t iy = seg[s].oy * g.sh - g.pt + i * g.dh;
            if (iy < 0 || iy >= g.h) {
                for (int64_t t = 0; t < seg[s].len; ++t) d[t] = 0.0f;
                continue;
            }
            gather_segment(plane + iy * g.w, g.w, seg[s].ox, seg[s].len, g.sw,
                           j * g.dw - g.pl, d);
        }
        for (int64_t lane = nvalid; lane < kNr; ++lane) dst[lane] = 0.0f;
    }
}

inline float finish(float v, const float* scale, const float* shift, int64_t r, int act) {
    if (scale) v *= scale[r];
    if (shift) v += shift[r];
    if (act >= 1 && v < 0.0f) v = 0.0f;
    if (act == 2 && v > 6.0f) v = 6.0f;
    return v;
}

void kernel_generic(const float* a, const float* b, int64_t ldb, int64_t kc,
                    const ConvGemmOut& out, int64_t row0, int64_t mr, bool first, bool last,
                    const float* scale, const float* shift, int act) {
    const int64_t nvalid = out.hi[out.count - 1], ldc = out.ldc;
    float acc[kMr][kNr] = {};
    for (int64_t i = 0; !first && i < out.count; ++i)
        for (int64_t r = 0; r < mr; ++r)
            for (int64_t l = out.lo[i]; l < out.hi[i]; ++l)
                acc[r][l] = out.base[i][(row0 + r) * ldc + l];
    for (int64_t k = 0; k < kc; ++k) {
        const float* bk = b + k * ldb;
        for (int64_t r = 0; r < mr; ++r) {
            const float ar = a[k * kMr + r];
            for (int64_t l = 0; l < nvalid; ++l) acc[r][l] += ar * bk[l];
        }
    }
    for (int64_t i = 0; i < out.count; ++i)
        for (int64_t r = 0; r < mr; ++r)
            for (int64_t l = out.lo[i]; l < out.hi[i]; ++l)
                out.base[i][(row0 + r) * ldc + l] =
                    last ? finish(acc[r][l], scale, shift, r, act) : acc[r][l];
}

// dst[k][r] = w[cb * kMr + r][k], rows past co zero (the SIMD twins transpose in registers).
void pack_weights_generic(const float* w, int64_t co, int64_t depth, int64_t cb,
                          float* dst) {
    for (int64_t k = 0; k < depth; ++k)
        for (int64_t r = 0; r < kMr; ++r) {
            const int64_t row = cb * kMr + r;
            dst[k * kMr + r] = row < co ? w[row * depth + k] : 0.0f;
        }
}

void add_run(ConvGemmOut* o, float* base, int64_t lo, int64_t hi) {
    if (o->count > 0 && o->base[o->count - 1] == base) {
        o->hi[o->count - 1] = hi;  // the next row of the same image
        return;
    }
    o->base[o->count] = base;
    o->lo[o->count] = lo;
    o->hi[o->count++] = hi;
}

// The partial sums the next channel block will reload (they sit in L2; the kernel's first
// multiply-adds wait on them otherwise); bench/RESULTS.md, fp32 kernels.
inline void prefetch_rows(const ConvGemmOut& o, int64_t row0, int64_t co) {
    const int64_t rows = co - row0 < kMr ? co - row0 : kMr;
    for (int64_t i = 0; i < o.count; ++i)
        for (int64_t r = 0; r < rows; ++r) {
            const float* at = o.base[i] + (row0 + r) * o.ldc + o.lo[i];
            __builtin_prefetch(at);
            __builtin_prefetch(at + (o.hi[i] - o.lo[i]) - 1);
        }
}

// Work item = (group of consecutive panels of the batch, share of the channel blocks).
// k outermost: the weights' k-slice of these channel blocks stays in L2 while the group's
// panels pass over it, so the weights are read from memory once per group.
void run_item(const Plan& p, int64_t item, float* panel) {
    const int64_t split = item % p.splits, group = item / p.splits;
    const int64_t cb0 = split * p.co_blocks / p.splits;
    const int64_t cb1 = (split + 1) * p.co_blocks / p.splits;
    const int64_t t0 = group * p.panels / p.groups, t1 = (group + 1) * p.panels / p.groups;
    // equal chunks of at most kKc rows (576 rows: 3 x 192, not 256 + 256 + 64)
    const int64_t chunks = (p.depth + kKc - 1) / kKc, step = (p.depth + chunks - 1) / chunks;
    for (int64_t k0 = 0; k0 < p.depth; k0 += step) {
        const int64_t kc = p.depth - k0 < step ? p.depth - k0 : step;
        for (int64_t t = t0; t < t1; ++t) {
            ConvGemmOut o;
            int64_t ldb;
            const float* b = panel_at(p, t, k0, kc, panel, &ldb, &o);
            for (int64_t cb = cb0; cb < cb1; ++cb) {
                const int64_t r0 = cb * kMr, mr = p.co - r0 < kMr ? p.co - r0 : kMr;
                if (k0 > 0 && cb + 1 < cb1) prefetch_rows(o, r0 + kMr, p.co);
                p.kernel(p.packed_w + (cb * p.depth + k0) * kMr, b, ldb, kc,
                         o, r0, mr, k0 == 0, k0 + kc == p.depth,
                         p.epi->scale ? p.epi->scale + r0 : nullptr,
                         p.epi->shift ? p.epi->shift + r0 : nullptr, p.epi->act);
            }
        }
    }
}

}  // namespace

int64_t row_segments(int64_t p0, int64_t nvalid, int64_t positions, int64_t ow,
                     ConvGemmSegment* seg) {
    int64_t count = 0;
    for (int64_t lane = 0; lane < nvalid;) {
        const int64_t p = p0 + lane, n = p / positions, q = p % positions, ox = q % ow;
        const int64_t len = ow - ox < nvalid - lane ? ow - ox : nvalid - lane;
        seg[count++] = {n, q / ow, ox, lane, len};
        lane += len;
    }
    return count;
}

const float* panel_at(const Plan& p, int64_t t, int64_t k0, int64_t kc, float* panel,
                      int64_t* ldb, ConvGemmOut* o) {
    o->count = 0;
    o->ldc = p.positions;
    if (p.pointwise) {
        const int64_t n = t / p.per_image, p0 = t % p.per_image * kNr;
        const int64_t nvalid = p.positions - p0 < kNr ? p.positions - p0 : kNr;
        add_run(o, p.out + n * p.co * p.positions + p0, 0, nvalid);
        *ldb = p.positions;
        return p.x + (n * p.g->c + k0) * p.positions + p0;
    }
    const int64_t p0 = t * kNr, all = p.g->n * p.positions;
    const int64_t nvalid = all - p0 < kNr ? all - p0 : kNr, ow = p.g->out_w();
    Segment seg[kNr];
    const int64_t nseg = row_segments(p0, nvalid, p.positions, ow, seg);
    for (int64_t s = 0; s < nseg; ++s) {
        const int64_t q = seg[s].oy * ow + seg[s].ox;  // the segment's first position
        add_run(o, p.out + seg[s].n * p.co * p.positions + q - seg[s].lane, seg[s].lane,
                seg[s].lane + seg[s].len);
    }
    p.pack(p.x, *p.g, seg, nseg, nvalid, k0, kc, panel);
    *ldb = kNr;
    return panel;
}

}  // namespace conv_gemm_detail

namespace {

// The kernels for the ISA in use (the family's one ISA decision): `few` is the few-channel
// plan, built for AVX-512 only (conv_gemm_few_avx512.cpp); fma_steps the FMA peak loop of the
// kernel's registers (12 FMAs a step of fma_lanes floats; null on the generic path).
struct ConvGemmKernels {
    ConvGemmKernel kernel;
    ConvGemmPack pack;
    ConvGemmPackWeights pack_weights;
    bool few;
    int64_t (*fma_steps)(int64_t);
    int fma_lanes;
};

void fill_conv_gemm(ConvGemmKernels& k, Isa isa) {
    using namespace conv_gemm_detail;
    if (isa >= Isa::avx512) {
        k = {conv_gemm_kernel_avx512(), conv_gemm_pack_avx512(), conv_gemm_pack_weights_avx512(),
             true, fma_peak_steps_avx512, 16};
    } else if (isa >= Isa::avx2) {
        k = {conv_gemm_kernel_avx2(), conv_gemm_pack_avx2(), conv_gemm_pack_weights_avx2(),
             false, fma_peak_steps_avx2, 8};
    } else {
        k = {kernel_generic, pack_generic, pack_weights_generic, false, nullptr, 0};
    }
}

Dispatch<ConvGemmKernels> kernels(fill_conv_gemm);

}  // namespace

ConvGemmPack conv_gemm_pack() {
    return kernels().pack;
}

double fma_peak(int64_t steps) {
    const ConvGemmKernels& k = kernels();
    if (!k.fma_steps) throw std::runtime_error("fma_peak: the current ISA path has no FMA");
    return peak_ops(k.fma_steps, steps, 12 * k.fma_lanes * 2);
}

int64_t conv_gemm_segments(int64_t p0, int64_t nvalid, int64_t ow, ConvGemmSegment* seg) {
    using conv_gemm_detail::row_segments;
    return row_segments(p0, nvalid, p0 + nvalid, ow, seg);  // every lane in image 0
}

void conv_gemm_forward(const float* x, const float* w, int64_t co, const Conv2dGeometry& g,
                       const ConvEpilogue& epi, float* out, ConvGemmPlan plan) {
    using namespace conv_gemm_detail;  // this unit's own helpers
    const ConvGemmKernels& k = kernels();
    Plan p{k.kernel, k.pack, x, nullptr, &epi, out, &g, co};
    p.positions = g.out_h() * g.out_w();
    p.depth = g.c * g.kh * g.kw;
    p.pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pb == 0 &&
                  g.pl == 0 && g.pr == 0;
    p.per_image = (p.positions + kNr - 1) / kNr;
    p.panels = p.pointwise ? g.n * p.per_image : (g.n * p.positions + kNr - 1) / kNr;
    p.co_blocks = (co + kMr - 1) / kMr;
    p.groups = (p.panels + kGroup - 1) / kGroup;
    const int64_t threads = omp_get_max_threads(), per_split = p.groups;
    // split the channel blocks too when the panel groups cannot keep every thread busy
    p.splits = (2 * threads + per_split - 1) / per_split;
    p.splits = p.splits < 1 ? 1 : (p.splits > p.co_blocks ? p.co_blocks : p.splits);
    const ConvGemmPackWeights pack_w = k.pack_weights;
    const bool parallel = g.n * co * p.positions * p.depth >= kParallelMacs && threads > 1;
    const int64_t used = parallel ? threads : 1;
    if (k.few && (plan == ConvGemmPlan::few ||
                   (plan == ConvGemmPlan::automatic && few_plan_wins(p, used)))) {
        run_few(p, w, used);
        return;
    }
    if (plan != ConvGemmPlan::slab && stream_plan(&p, plan == ConvGemmPlan::stream ? 0 : used)) {
        run_stream(p, pack_w, w, parallel);
        return;
    }
    // every element is written by the packer: no zero fill (9.4 MB at 512 channels, 3x3)
    const std::unique_ptr<float[]> packed_w(new float[p.co_blocks * p.depth * kMr]);
    p.packed_w = packed_w.get();
    const int64_t items = per_split * p.splits;
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static)
        for (int64_t cb = 0; cb < p.co_blocks; ++cb)
            pack_w(w, co, p.depth, cb, packed_w.get() + cb * p.depth * kMr);
        alignas(64) float panel[kKc * kNr];
#pragma omp for schedule(static)
        for (int64_t item = 0; item < items; ++item) run_item(p, item, panel);
    }
}

}  // namespace tianyuan
