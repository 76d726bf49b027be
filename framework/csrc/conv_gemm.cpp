// Direct GEMM convolution (conv_gemm.h): panel packing from the image, the OpenMP driver,
// the generic register-block kernel and the ISA dispatch.
#include "conv_gemm.h"

#include <omp.h>

#include <cstddef>
#include <memory>

#include "cpu.h"

namespace tianyuan {
namespace {

constexpr int64_t kNr = kConvGemmNr, kMr = kConvGemmMr, kKc = kConvGemmKc;
constexpr int64_t kGroup = 8;  // panels per work item (their output tile stays in L2)
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelMacs = 1 << 20;

using Segment = ConvGemmSegment;

// The row segments of the nvalid lanes from position p0 of the batch's positions (image n's
// start at n * positions; ow: output width).
int64_t row_segments(int64_t p0, int64_t nvalid, int64_t positions, int64_t ow, Segment* seg) {
    int64_t count = 0;
    for (int64_t lane = 0; lane < nvalid;) {
        const int64_t p = p0 + lane, n = p / positions, q = p % positions, ox = q % ow;
        const int64_t len = ow - ox < nvalid - lane ? ow - ox : nvalid - lane;
        seg[count++] = {n, q / ow, ox, lane, len};
        lane += len;
    }
    return count;
}

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

// dst[k][r] = w[cb * kMr + r][k], rows past co zero (the AVX-512 twin transposes in
// registers).
void pack_weights_generic(const float* w, int64_t co, int64_t depth, int64_t cb,
                          float* dst) {
    for (int64_t k = 0; k < depth; ++k)
        for (int64_t r = 0; r < kMr; ++r) {
            const int64_t row = cb * kMr + r;
            dst[k * kMr + r] = row < co ? w[row * depth + k] : 0.0f;
        }
}

// What every work item of one call shares: the ISA's kernel and packer, sizes, the split.
struct Plan {
    ConvGemmKernel kernel;
    ConvGemmPack pack;
    const float* x;
    const float* packed_w;  // (co_blocks, depth, kMr)
    const ConvEpilogue* epi;
    float* out;
    const Conv2dGeometry* g;
    int64_t co, positions, depth, co_blocks, splits;
    int64_t per_image;  // pointwise: panels per image (x is read in place, image by image)
    int64_t panels;     // in the whole batch
    int64_t groups;     // of about kGroup consecutive panels
    bool pointwise;
};

void add_run(ConvGemmOut* o, float* base, int64_t lo, int64_t hi) {
    if (o->count > 0 && o->base[o->count - 1] == base) {
        o->hi[o->count - 1] = hi;  // the next row of the same image
        return;
    }
    o->base[o->count] = base;
    o->lo[o->count] = lo;
    o->hi[o->count++] = hi;
}

// Panel t of the batch: its right-hand side rows [k0, k0 + kc) (packed into `panel`, or x
// in place) and where its output lanes go.
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

// Work item = (group of consecutive panels of the batch, share of the channel blocks).
// k outermost: the weights' k-slice of these channel blocks stays in L2 while the group's
// panels pass over it, so the weights are read from memory once per group.
void run_item(const Plan& p, int64_t item, float* panel) {
    const int64_t split = item % p.splits, group = item / p.splits;
    const int64_t cb0 = split * p.co_blocks / p.splits;
    const int64_t cb1 = (split + 1) * p.co_blocks / p.splits;
    const int64_t t0 = group * p.panels / p.groups, t1 = (group + 1) * p.panels / p.groups;
    for (int64_t k0 = 0; k0 < p.depth; k0 += kKc) {
        const int64_t kc = p.depth - k0 < kKc ? p.depth - k0 : kKc;
        for (int64_t t = t0; t < t1; ++t) {
            ConvGemmOut o;
            int64_t ldb;
            const float* b = panel_at(p, t, k0, kc, panel, &ldb, &o);
            for (int64_t cb = cb0; cb < cb1; ++cb) {
                const int64_t r0 = cb * kMr, mr = p.co - r0 < kMr ? p.co - r0 : kMr;
                p.kernel(p.packed_w + (cb * p.depth + k0) * kMr, b, ldb, kc,
                         o, r0, mr, k0 == 0, k0 + kc == p.depth,
                         p.epi->scale ? p.epi->scale + r0 : nullptr,
                         p.epi->shift ? p.epi->shift + r0 : nullptr, p.epi->act);
            }
        }
    }
}

// The stream plan (batch 1 on deep layers: few panels, megabytes of weights). The default
// plan packs all of w up front (a read and a write of w, then reads of the packed copy) and
// reloads its partial sums every kKc rows; at batch 1 on 512 channels at 7x7 that took 2-2.5
// ms, where a plain copy of w takes 0.75. Here each work item packs its panels over the whole
// depth once (they stay in its L2), then packs one channel block of w at a time into a
// buffer that stays in L2 and runs it over those panels, the accumulators in registers
// through the whole depth: w is read from memory once per panel group.
constexpr int64_t kStreamBytes = 5 << 18;  // packed panels per work item (1.25 MiB)
constexpr int64_t kStreamPanels = 16;      // panels per work item at most

// Splits the panels into p->groups groups and the channel blocks into p->splits shares for
// about `threads` work items; false where the panels need more than `threads` groups
// (threads 0: the plan is forced, as many groups as the panels need).
bool stream_plan(Plan* p, int64_t threads) {
    const int64_t bytes = p->pointwise ? 0 : p->panels * p->depth * kNr * int64_t(sizeof(float));
    int64_t groups = (bytes + kStreamBytes - 1) / kStreamBytes;
    const int64_t by_count = (p->panels + kStreamPanels - 1) / kStreamPanels;
    groups = groups > by_count ? groups : by_count;
    groups = groups < 1 ? 1 : groups;
    if (threads == 0) threads = groups;
    if (groups > threads) return false;
    p->splits = threads / groups < p->co_blocks ? threads / groups : p->co_blocks;
    p->groups = threads / p->splits < p->panels ? threads / p->splits : p->panels;
    return true;
}

struct AlignedFloats {  // n floats at a 64-byte boundary (pack_row's aligned stores)
    explicit AlignedFloats(int64_t n) : raw(new float[n + 16]) {
        const uintptr_t at = reinterpret_cast<uintptr_t>(raw.get());
        data = reinterpret_cast<float*>((at + 63) & ~uintptr_t(63));
    }
    std::unique_ptr<float[]> raw;
    float* data;
};

void run_stream_item(const Plan& p, ConvGemmPackWeights pack_w, const float* w, int64_t item,
                     float* panels, float* wblock) {
    const int64_t split = item % p.splits, group = item / p.splits;
    const int64_t cb0 = split * p.co_blocks / p.splits;
    const int64_t cb1 = (split + 1) * p.co_blocks / p.splits;
    const int64_t t0 = group * p.panels / p.groups, t1 = (group + 1) * p.panels / p.groups;
    ConvGemmOut outs[kStreamPanels];
    const float* bs[kStreamPanels];
    int64_t ldbs[kStreamPanels];
    for (int64_t t = t0; t < t1; ++t)
        bs[t - t0] = panel_at(p, t, 0, p.depth, panels + (t - t0) * p.depth * kNr,
                              &ldbs[t - t0], &outs[t - t0]);
    for (int64_t cb = cb0; cb < cb1; ++cb) {
        pack_w(w, p.co, p.depth, cb, wblock);
        const int64_t r0 = cb * kMr, mr = p.co - r0 < kMr ? p.co - r0 : kMr;
        for (int64_t t = t0; t < t1; ++t)
            p.kernel(wblock, bs[t - t0], ldbs[t - t0], p.depth, outs[t - t0], r0, mr, true,
                     true, p.epi->scale ? p.epi->scale + r0 : nullptr,
                     p.epi->shift ? p.epi->shift + r0 : nullptr, p.epi->act);
    }
}

// The few-positions plan (conv_gemm.h). A work item is a chunk of about kFewChunkPanels
// panels (224 positions) by a share of the kFewNr-channel blocks; per kFewKc reduction rows it
// packs its panels and one block of w at a time, its partial sums kept transposed in `acc`.
constexpr int64_t kFewKc = 128;           // 32 KiB of w per block: it stays in L1
constexpr int64_t kFewChunkPanels = 8;    // 128 KiB of panels at kFewKc rows (L2)
constexpr int64_t kFewBlocksPerPanel = kFewPanel / kFewMr;

constexpr int64_t kFewMaxPositions = 1024;

// Where the few-positions plan is taken. Measured at 2 threads, interleaved with the other
// plans (2026-12-01): up to kFewMaxPositions positions in the batch, with more than 1024
// reduction rows (3x3 layers from 128 channels: 512 at 7x7, batch 1 1.82 -> 1.39 ms, batch
// 8 12.5 -> 9.8; 256 at 14x14 1.68 -> 1.26; 128 at 28x28 1.55 -> 1.42) or >= 512 output
// channels from >= 128 (1x1 layers: 512 -> 2048 at 7x7 0.64 -> 0.52 ms, 160 -> 960 0.10 ->
// 0.085; batch 16 2048 -> 512 13.0 -> 8.8), and a channel block for every thread. 1x1 layers
// with fewer channels, 64 -> 128 3x3 at 28x28 and the stems ran 1.1-3x slower on it.
bool few_plan_wins(const Plan& p, int64_t threads) {
    const int64_t co_blocks = (p.co + kFewNr - 1) / kFewNr;
    return p.g->n * p.positions <= kFewMaxPositions && co_blocks >= threads &&
           (p.depth > 1024 || (p.co >= 512 && p.depth >= 128));
}

void run_few(const Plan& p, const float* w, int64_t threads) {
    const int64_t all = p.g->n * p.positions, ow = p.g->out_w();
    const int64_t panels = (all + kFewPanel - 1) / kFewPanel;
    const int64_t blocks = (all + kFewMr - 1) / kFewMr;
    const int64_t co_blocks = (p.co + kFewNr - 1) / kFewNr, per_block = kFewMr * kFewNr;
    // chunks of equal size, as many as the threads or a multiple; else split the channel
    // blocks too (one chunk: batch 1 on 7x7 / 14x14)
    int64_t chunks = (panels + kFewChunkPanels - 1) / kFewChunkPanels;
    if (chunks > 1) chunks = (chunks + threads - 1) / threads * threads;
    chunks = chunks < panels ? chunks : panels;
    int64_t splits = chunks % threads == 0 ? 1 : threads;
    splits = splits < co_blocks ? splits : co_blocks;
    const int64_t kc_max = p.depth < kFewKc ? p.depth : kFewKc;
    const ConvGemmFewKernel kernel = conv_gemm_few_kernel_avx512();
    const ConvGemmFewPackWeights pack_w = conv_gemm_few_pack_weights_avx512();
    const ConvGemmFewStore store = conv_gemm_few_store_avx512();
    const ConvEpilogue& e = *p.epi;
    const AlignedFloats acc(co_blocks * blocks * per_block);
#pragma omp parallel for schedule(static) if (threads > 1)
    for (int64_t item = 0; item < chunks * splits; ++item) {
        const int64_t chunk = item / splits, split = item % splits;
        const int64_t cb0 = split * co_blocks / splits, cb1 = (split + 1) * co_blocks / splits;
        const int64_t pn0 = chunk * panels / chunks, pn1 = (chunk + 1) * panels / chunks;
        const int64_t b0 = pn0 * kFewBlocksPerPanel;
        const int64_t b1 = pn1 * kFewBlocksPerPanel < blocks ? pn1 * kFewBlocksPerPanel : blocks;
        const AlignedFloats xt((pn1 - pn0) * kc_max * kNr), wt(kc_max * kFewNr);
        if (pn0 == pn1) continue;
        for (int64_t k0 = 0; k0 < p.depth; k0 += kFewKc) {
            const int64_t kc = p.depth - k0 < kFewKc ? p.depth - k0 : kFewKc;
            for (int64_t pn = pn0; pn < pn1; ++pn) {
                const int64_t q0 = pn * kFewPanel;
                const int64_t nvalid = all - q0 < kFewPanel ? all - q0 : kFewPanel;
                Segment seg[kNr];
                const int64_t nseg = row_segments(q0, nvalid, p.positions, ow, seg);
                p.pack(p.x, *p.g, seg, nseg, nvalid, k0, kc, xt.data + (pn - pn0) * kc * kNr);
            }
            for (int64_t cb = cb0; cb < cb1; ++cb) {
                pack_w(w, p.co, p.depth, cb * kFewNr, k0, kc, wt.data);
                const int64_t rest = p.co - cb * kFewNr;
                const int64_t vectors = rest >= kFewNr ? kFewNr / 16 : (rest + 15) / 16;
                for (int64_t b = b0; b < b1; ++b)
                    kernel(xt.data + (b - b0) / kFewBlocksPerPanel * kc * kNr +
                               b % kFewBlocksPerPanel * kFewMr,
                           wt.data, kc, vectors, acc.data + (cb * blocks + b) * per_block,
                           k0 == 0);
            }
        }
        for (int64_t cb = cb0; cb < cb1; ++cb) {
            const int64_t c0 = cb * kFewNr, nc = p.co - c0 < kFewNr ? p.co - c0 : kFewNr;
            for (int64_t b = b0; b < b1; ++b) {
                const float* a = acc.data + (cb * blocks + b) * per_block;
                // the block's positions, split where they cross into the next image
                for (int64_t q = b * kFewMr, q1 = q + kFewMr < all ? q + kFewMr : all; q < q1;) {
                    const int64_t n = q / p.positions, pos = q % p.positions;
                    const int64_t np = p.positions - pos < q1 - q ? p.positions - pos : q1 - q;
                    store(a + (q - b * kFewMr) * kFewNr, np, nc,
                          e.scale ? e.scale + c0 : nullptr, e.shift ? e.shift + c0 : nullptr,
                          e.act, p.out + (n * p.co + c0) * p.positions + pos, p.positions);
                    q += np;
                }
            }
        }
    }
}

}  // namespace

ConvGemmPack conv_gemm_pack() {
    return current_isa() >= Isa::avx512 ? conv_gemm_pack_avx512() : pack_generic;
}

int64_t conv_gemm_segments(int64_t p0, int64_t nvalid, int64_t ow, ConvGemmSegment* seg) {
    return row_segments(p0, nvalid, p0 + nvalid, ow, seg);  // every lane in image 0
}

void conv_gemm_forward(const float* x, const float* w, int64_t co, const Conv2dGeometry& g,
                       const ConvEpilogue& epi, float* out, ConvGemmPlan plan) {
    const bool avx512 = current_isa() >= Isa::avx512;
    Plan p{avx512 ? conv_gemm_kernel_avx512() : kernel_generic,
           avx512 ? conv_gemm_pack_avx512() : pack_generic, x, nullptr, &epi, out, &g, co};
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
    const ConvGemmPackWeights pack_w = avx512 ? conv_gemm_pack_weights_avx512()
                                              : pack_weights_generic;
    const bool parallel = g.n * co * p.positions * p.depth >= kParallelMacs && threads > 1;
    const int64_t used = parallel ? threads : 1;
    if (avx512 && (plan == ConvGemmPlan::few ||
                   (plan == ConvGemmPlan::automatic && few_plan_wins(p, used)))) {
        run_few(p, w, used);
        return;
    }
    if (plan != ConvGemmPlan::slab && stream_plan(&p, plan == ConvGemmPlan::stream ? 0 : used)) {
        const int64_t per_item = (p.panels + p.groups - 1) / p.groups;
#pragma omp parallel for schedule(static) if (parallel)
        for (int64_t item = 0; item < p.groups * p.splits; ++item) {
            const AlignedFloats panels(p.pointwise ? 0 : per_item * p.depth * kNr);
            const AlignedFloats wblock(p.depth * kMr);
            run_stream_item(p, pack_w, w, item, panels.data, wblock.data);
        }
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
