// int8 transposed convolution (int8_deconv.h): weight packing, the dispatch table's one ISA
// choice, and the threaded driver (GEMM into int32 columns, col2im per output row,
// requantization). ISA kernels: int8_deconv_avx2.cpp, int8_deconv_avx512.cpp and the GEMM
// blocks and requantization rows of int8_gemm.h.
#include "int8_deconv/int8_deconv.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "runtime/dispatch.h"

namespace tianyuan {
namespace int8 {

void add_taps_generic(int32_t* acc, const int32_t* c, const int32_t* fix, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        acc[i] = static_cast<int32_t>(static_cast<uint32_t>(acc[i]) + static_cast<uint32_t>(c[i]) -
                                      static_cast<uint32_t>(fix[i]));
    }
}

namespace {

// The family's one ISA decision: the GEMM block and requantization row are the int8 GEMM
// family's for the same ISA (fill_int8_gemm).
void fill_int8_deconv(DeconvKernels& k, Isa isa) {
    GemmKernels gemm{};
    fill_int8_gemm(gemm, isa);
    k.gemm_block = gemm.block;
    k.requant_row = gemm.requant_row;
    k.add_taps = isa >= Isa::avx512 ? add_taps_avx512
                 : isa >= Isa::avx2 ? add_taps_avx2
                                    : add_taps_generic;
}

Dispatch<DeconvKernels> kernels(fill_int8_deconv);

// GEMM tiles (int8_gemm.cpp's): 96 rows x 4 panels of 16 columns.
constexpr int64_t kTileRows = 96;
constexpr int64_t kTilePanels = 4;
// The int32 columns of one chunk of images stay under this many bytes (at least one image).
constexpr int64_t kChunkBytes = int64_t{16} << 20;

// The sizes every step of one call shares.
struct Plan {
    int64_t cg, ocg, taps, kp, np, hw, group_bytes;
};

Plan plan_of(const DeconvGeom& g) {
    Plan p{};
    p.cg = g.c / g.groups;
    p.ocg = g.oc / g.groups;
    p.taps = deconv_taps(p.ocg, g.kh, g.kw);
    p.kp = round_up(p.cg, kGroup);
    p.np = round_up(p.taps, kPanel);
    p.hw = g.h * g.w;
    p.group_bytes = deconv_group_bytes(p.cg, p.ocg, g.kh, g.kw);
    return p;
}

// Images [n0, n0 + cnt) of x as GEMM rows: a (groups, cnt * H * W, kp) u8, the sign bit
// flipped for s8, zeros past C/groups.
void gather_rows(const QIn& x, const DeconvGeom& g, const Plan& p, int64_t n0, int64_t cnt,
                 uint8_t* a) {
    const uint8_t flip = flip_of(x);
    const int64_t rows = cnt * p.hw;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && rows * g.c > (1 << 16))
    for (int64_t t = 0; t < g.groups * cnt; ++t) {
        const int64_t grp = t / cnt, img = t % cnt;
        uint8_t* dst = a + (grp * rows + img * p.hw) * p.kp;
        const uint8_t* src = x.data + ((n0 + img) * g.c + grp * p.cg) * p.hw;
        for (int64_t q = 0; q < p.hw; ++q) {
            uint8_t* row = dst + q * p.kp;
            for (int64_t ch = 0; ch < p.cg; ++ch) row[ch] = src[ch * p.hw + q] ^ flip;
            for (int64_t ch = p.cg; ch < p.kp; ++ch) row[ch] = 0;
        }
    }
}

// cols (groups, rows, np) = a (groups, rows, kp) x each group's packed weights, raw (the zero
// point is corrected in col2im).
void gemm_cols(const DeconvKernels& k, const Plan& p, int64_t groups, const uint8_t* a,
               int64_t rows, const int8_t* packed, int32_t* cols) {
    const int64_t panels = p.np / kPanel;
    const int64_t row_tiles = (rows + kTileRows - 1) / kTileRows;
    const int64_t col_tiles = (panels + kTilePanels - 1) / kTilePanels;
    const int64_t tiles = row_tiles * col_tiles;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && \
                                                 rows * p.np * p.kp * groups > (1 << 18))
    for (int64_t t = 0; t < groups * tiles; ++t) {
        const int64_t grp = t / tiles, rt = t % tiles;
        const int64_t i0 = (rt % row_tiles) * kTileRows;
        const int64_t p0 = (rt / row_tiles) * kTilePanels;
        const int64_t m = std::min(kTileRows, rows - i0);
        const int64_t npan = std::min(kTilePanels, panels - p0);
        k.gemm_block(a + (grp * rows + i0) * p.kp, p.kp, m,
                     packed + grp * p.group_bytes + p0 * p.kp * kPanel, p.kp, npan,
                     cols + (grp * rows + i0) * p.np + p0 * kPanel, p.np);
    }
}

// Output row oy of image img (of the chunk) into acc (ow, OC), zeroed first: every input
// pixel (y, x) and tap (i, j) with y * sh + i * dh - pt == oy and x * sw + j * dw - pl inside
// [0, ow) adds its OC/groups columns, less the zero point's share (fix).
void col2im_row(const DeconvKernels& k, const DeconvGeom& g, const Plan& p, const int32_t* cols,
                int64_t rows, const int32_t* fix, int64_t img, int64_t oy, int32_t* acc) {
    std::fill(acc, acc + g.ow * g.oc, 0);
    for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t t = oy + g.pt - i * g.dh;
        if (t < 0 || t % g.sh || t / g.sh >= g.h) continue;
        const int64_t y = t / g.sh;
        for (int64_t j = 0; j < g.kw; ++j) {
            // input columns x with 0 <= x * sw + j * dw - pl < ow
            const int64_t off = j * g.dw - g.pl;
            if (off > g.ow - 1) break;  // this tap and the next land right of the output
            const int64_t x0 = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
            const int64_t x1 = std::min(g.w, (g.ow - 1 - off) / g.sw + 1);
            const int64_t tap = (i * g.kw + j) * p.ocg;
            for (int64_t grp = 0; grp < g.groups; ++grp) {
                const int32_t* src = cols + (grp * rows + img * p.hw + y * g.w) * p.np + tap;
                const int32_t* f = fix + grp * p.taps + tap;
                for (int64_t x = x0; x < x1; ++x) {
                    k.add_taps(acc + (x * g.sw + off) * g.oc + grp * p.ocg, src + x * p.np, f,
                               p.ocg);
                }
            }
        }
    }
}

// One output row's accumulators acc (ow, OC) requantized into dst (OC planes `plane` apart):
// along the channels, a pixel at a time, where there are more channels than pixels (then a
// byte transpose), else along the row, a channel at a time (the last layer of a generator:
// 3 channels, 32 pixels), through the transposed accumulators `tr`.
void requant_row(const DeconvKernels& k, const DeconvGeom& g, const int32_t* acc,
                 const Requant& r, int64_t plane, int32_t* tr, uint8_t* bytes, uint8_t* dst) {
    if (g.ow > g.oc) {
        for (int64_t o = 0; o < g.oc; ++o) {
            for (int64_t ox = 0; ox < g.ow; ++ox) tr[o * g.ow + ox] = acc[ox * g.oc + o];
            Requant ro = r;   // channel o's parameters for every lane
            ro.bias += o * r.step;
            ro.multiplier += o * r.step;
            ro.shift += o * r.step;
            ro.step = 0;
            k.requant_row(tr + o * g.ow, g.ow, ro, dst + o * plane);
        }
        return;
    }
    for (int64_t ox = 0; ox < g.ow; ++ox) {
        k.requant_row(acc + ox * g.oc, g.oc, r, bytes + ox * g.oc);
    }
    for (int64_t o = 0; o < g.oc; ++o) {
        for (int64_t ox = 0; ox < g.ow; ++ox) dst[o * plane + ox] = bytes[ox * g.oc + o];
    }
}

// Images [n0, n0 + cnt): col2im and requantization per output row, rows in parallel.
void output_rows(const DeconvKernels& k, const DeconvGeom& g, const Plan& p,
                 const int32_t* cols, const int32_t* fix, const Requant& r, int64_t n0,
                 int64_t cnt, uint8_t* out) {
    const int64_t rows = cnt * p.hw, plane = g.oh * g.ow;
#pragma omp parallel if (!omp_in_parallel() && cnt * plane * g.oc > (1 << 14))
    {
        const size_t size = static_cast<size_t>(g.ow * g.oc);
        std::vector<int32_t> acc(size), tr(size);
        std::vector<uint8_t> bytes(size);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < cnt * g.oh; ++t) {
            const int64_t img = t / g.oh, oy = t % g.oh;
            col2im_row(k, g, p, cols, rows, fix, img, oy, acc.data());
            requant_row(k, g, acc.data(), r, plane, tr.data(), bytes.data(),
                        out + (n0 + img) * g.oc * plane + oy * g.ow);  // (OC, oh, ow)
        }
    }
}

// Images [n0, n1) in chunks whose int32 columns fit kChunkBytes: gather, GEMM, col2im and
// requantization per chunk; each step threaded unless called from a parallel region (nested
// teams are not wanted: libgomp may grant them, and their spinning threads multiply a small
// layer's time; bench/RESULTS.md, int8 transposed convolution).
void images(const DeconvKernels& k, const QIn& x, const DeconvGeom& g, const Plan& p,
            const int8_t* packed, const int32_t* fix, const Requant& r, int64_t n0, int64_t n1,
            uint8_t* out) {
    const int64_t per_image = std::max<int64_t>(1, p.hw * p.np * 4 * g.groups);
    const int64_t chunk = std::max<int64_t>(1, std::min(n1 - n0, kChunkBytes / per_image));
    std::unique_ptr<uint8_t[]> a(new uint8_t[static_cast<size_t>(g.groups * chunk * p.hw * p.kp)]);
    std::unique_ptr<int32_t[]> cols(
        new int32_t[static_cast<size_t>(g.groups * chunk * p.hw * p.np)]);
    for (int64_t i = n0; i < n1; i += chunk) {
        const int64_t cnt = std::min(chunk, n1 - i);
        gather_rows(x, g, p, i, cnt, a.get());
        gemm_cols(k, p, g.groups, a.get(), cnt * p.hw, packed, cols.get());
        output_rows(k, g, p, cols.get(), fix, r, i, cnt, out);
    }
}

}  // namespace

const DeconvKernels& deconv_kernels() { return kernels(); }

void pack_deconv_weights(const int8_t* w, int64_t c, int64_t ocg, int64_t kh, int64_t kw,
                         int64_t groups, int8_t* packed, int32_t* row_sums) {
    const int64_t cg = c / groups, taps = deconv_taps(ocg, kh, kw);
    std::vector<int8_t> wt(static_cast<size_t>(taps * cg));  // (taps = (i, j, oc), C/groups)
    for (int64_t grp = 0; grp < groups; ++grp) {
        for (int64_t ch = 0; ch < cg; ++ch) {
            const int8_t* src = w + (grp * cg + ch) * ocg * kh * kw;  // (OC/groups, kh, kw)
            for (int64_t o = 0; o < ocg; ++o) {
                for (int64_t ij = 0; ij < kh * kw; ++ij) {
                    wt[(ij * ocg + o) * cg + ch] = src[o * kh * kw + ij];
                }
            }
        }
        pack_weights(wt.data(), taps, cg, packed + grp * deconv_group_bytes(cg, ocg, kh, kw),
                     row_sums + grp * taps);
    }
}

void conv_transpose2d(const QIn& x, const DeconvGeom& g, const int8_t* packed,
                      const int32_t* row_sums, const Requant& r, uint8_t* out) {
    const DeconvKernels& k = kernels();
    const Plan p = plan_of(g);
    // the zero point's share of each column: z * row_sums, modulo 2^32
    std::vector<int32_t> fix(static_cast<size_t>(g.groups * p.taps));
    const uint32_t z = static_cast<uint32_t>(zero_of(x));
    for (size_t q = 0; q < fix.size(); ++q) {
        fix[q] = static_cast<int32_t>(z * static_cast<uint32_t>(row_sums[q]));
    }
    const int64_t threads = omp_get_max_threads();
    const bool big = static_cast<double>(g.n) * p.hw * p.np * p.kp * g.groups > (1 << 18);
    if (threads < 2 || g.n < threads || !big || omp_in_parallel()) {
        images(k, x, g, p, packed, fix.data(), r, 0, g.n, out);   // each step threaded
        return;
    }
    // a batch of at least one image a thread: each thread its own images, no barrier between
    // the steps (on a busy machine, waiting threads had taken a third of a 2-thread call)
#pragma omp parallel num_threads(static_cast<int>(threads))
    {
        const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        images(k, x, g, p, packed, fix.data(), r, g.n * t / nt, g.n * (t + 1) / nt, out);
    }
}

}  // namespace int8
}  // namespace tianyuan
