// Direct GEMM convolution (conv_gemm.h): panel packing from the image, the OpenMP driver,
// the generic register-block kernel and the ISA dispatch.
#include "conv_gemm.h"

#include <omp.h>

#include <cstddef>
#include <vector>

#include "cpu.h"

namespace tianyuan {
namespace {

constexpr int64_t kNr = kConvGemmNr, kMr = kConvGemmMr, kKc = kConvGemmKc;
constexpr int64_t kGroup = 8;  // panels per work item (their output tile stays in L2)
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelMacs = 1 << 20;

using Segment = ConvGemmSegment;

int64_t row_segments(int64_t p0, int64_t nvalid, int64_t ow, Segment* seg) {
    int64_t count = 0;
    for (int64_t lane = 0; lane < nvalid;) {
        const int64_t p = p0 + lane, ox = p % ow;
        const int64_t len = ow - ox < nvalid - lane ? ow - ox : nvalid - lane;
        seg[count++] = {p / ow, ox, lane, len};
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
        const float* plane = xn + c * g.h * g.w;
        float* dst = panel + kk * kNr;
        for (int64_t s = 0; s < nseg; ++s) {
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

void kernel_generic(const float* a, const float* b, int64_t ldb, int64_t kc, float* out,
                    int64_t ldc, int64_t mr, int64_t nvalid, bool first, bool last,
                    const float* scale, const float* shift, int act) {
    float acc[kMr][kNr];
    for (int64_t r = 0; r < mr; ++r)
        for (int64_t l = 0; l < kNr; ++l)
            acc[r][l] = first || l >= nvalid ? 0.0f : out[r * ldc + l];
    for (int64_t k = 0; k < kc; ++k) {
        const float* bk = b + k * ldb;
        for (int64_t r = 0; r < mr; ++r) {
            const float ar = a[k * kMr + r];
            for (int64_t l = 0; l < nvalid; ++l) acc[r][l] += ar * bk[l];
        }
    }
    for (int64_t r = 0; r < mr; ++r)
        for (int64_t l = 0; l < nvalid; ++l)
            out[r * ldc + l] = last ? finish(acc[r][l], scale, shift, r, act) : acc[r][l];
}

// packed[cb][k][r] = w[cb * kMr + r][k], rows past co zero.
void pack_weights(const float* w, int64_t co, int64_t depth, int64_t cb, float* packed) {
    float* dst = packed + cb * depth * kMr;
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
    const float* packed_w;     // (co_blocks, depth, kMr)
    const ConvEpilogue* epi;
    float* out;
    const Conv2dGeometry* g;
    int64_t co, positions, depth, co_blocks, splits;
    int64_t panels;  // per image
    int64_t groups;  // of kGroup panels over the whole batch
    bool pointwise;
};

// Work item = (group of kGroup consecutive panels of the batch, which may straddle images,
// share of the channel blocks). k outermost: the weights' k-slice of these channel blocks
// stays in L2 while the group's panels pass over it, so the weights are read from memory
// once per group (on 7x7 maps, 2 panels an image, a group of one image's panels read them
// 4x as often).
void run_item(const Plan& p, int64_t item, float* panel) {
    const int64_t split = item % p.splits, group = item / p.splits;
    const int64_t cb0 = split * p.co_blocks / p.splits;
    const int64_t cb1 = (split + 1) * p.co_blocks / p.splits;
    const int64_t total = p.g->n * p.panels;
    const int64_t t0 = group * kGroup, t1 = t0 + kGroup < total ? t0 + kGroup : total;
    const int64_t image_size = p.g->c * p.g->h * p.g->w;
    for (int64_t k0 = 0; k0 < p.depth; k0 += kKc) {
        const int64_t kc = p.depth - k0 < kKc ? p.depth - k0 : kKc;
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t n = t / p.panels, p0 = t % p.panels * kNr;
            const int64_t nvalid = p.positions - p0 < kNr ? p.positions - p0 : kNr;
            const float* xn = p.x + n * image_size;
            const float* b = xn + k0 * p.positions + p0;  // pointwise: x read in place
            int64_t ldb = p.positions;
            if (!p.pointwise) {
                Segment seg[kNr];
                const int64_t nseg = row_segments(p0, nvalid, p.g->out_w(), seg);
                p.pack(xn, *p.g, seg, nseg, nvalid, k0, kc, panel);
                b = panel;
                ldb = kNr;
            }
            for (int64_t cb = cb0; cb < cb1; ++cb) {
                const int64_t r0 = cb * kMr, mr = p.co - r0 < kMr ? p.co - r0 : kMr;
                p.kernel(p.packed_w + (cb * p.depth + k0) * kMr, b, ldb, kc,
                         p.out + (n * p.co + r0) * p.positions + p0, p.positions, mr, nvalid,
                         k0 == 0, k0 + kc == p.depth, p.epi->scale ? p.epi->scale + r0 : nullptr,
                         p.epi->shift ? p.epi->shift + r0 : nullptr, p.epi->act);
            }
        }
    }
}

}  // namespace

ConvGemmPack conv_gemm_pack() {
    return current_isa() >= Isa::avx512 ? conv_gemm_pack_avx512() : pack_generic;
}

int64_t conv_gemm_segments(int64_t p0, int64_t nvalid, int64_t ow, ConvGemmSegment* seg) {
    return row_segments(p0, nvalid, ow, seg);
}

void conv_gemm_forward(const float* x, const float* w, int64_t co, const Conv2dGeometry& g,
                       const ConvEpilogue& epi, float* out) {
    const bool avx512 = current_isa() >= Isa::avx512;
    Plan p{avx512 ? conv_gemm_kernel_avx512() : kernel_generic,
           avx512 ? conv_gemm_pack_avx512() : pack_generic, x, nullptr, &epi, out, &g, co};
    p.positions = g.out_h() * g.out_w();
    p.depth = g.c * g.kh * g.kw;
    p.panels = (p.positions + kNr - 1) / kNr;
    p.co_blocks = (co + kMr - 1) / kMr;
    p.groups = (g.n * p.panels + kGroup - 1) / kGroup;
    p.pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pb == 0 &&
                  g.pl == 0 && g.pr == 0;
    const int64_t threads = omp_get_max_threads(), per_split = p.groups;
    // split the channel blocks too when the panel groups cannot keep every thread busy
    p.splits = (2 * threads + per_split - 1) / per_split;
    p.splits = p.splits < 1 ? 1 : (p.splits > p.co_blocks ? p.co_blocks : p.splits);
    std::vector<float> packed_w(static_cast<size_t>(p.co_blocks * p.depth * kMr));
    p.packed_w = packed_w.data();
    const int64_t items = per_split * p.splits;
    const bool parallel = g.n * co * p.positions * p.depth >= kParallelMacs && threads > 1;
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static)
        for (int64_t cb = 0; cb < p.co_blocks; ++cb)
            pack_weights(w, co, p.depth, cb, packed_w.data());
        alignas(64) float panel[kKc * kNr];
#pragma omp for schedule(static)
        for (int64_t item = 0; item < items; ++item) run_item(p, item, panel);
    }
}

}  // namespace tianyuan
