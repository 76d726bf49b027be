// Weight gradient of the direct GEMM convolution (conv_gemm.h): the OpenMP driver, the
// generic kernels and the ISA dispatch.
//
// gw^T (K x Co) += X (K x P) times gy^T (P x Co), the reduction running over all positions
// of all images. Per group of images (its gy^T under kGyBudget bytes): the threads first
// gather the group's gy^T rows together (channel blocks of kNr, zero past Co); then each
// task, owning a range of k (and a share of the chunks, see kShares), takes blocks of up to
// kKb rows k and, per chunk of kChunk panels (kNr positions each, any images), packs the
// panels straight from the image with the forward's packer and runs every kWgradMr x
// kWgradNr register block over the chunk. The task's block of gw^T stays in L2 across the
// chunks; after the last group the shares are added and transposed into gw.
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "conv/conv_gemm.h"
#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace {

constexpr int64_t kNr = kConvGemmNr, kMr = kWgradMr, kCr = kWgradNr;
constexpr int64_t kKb = 12 * kMr;  // rows k per packed chunk (a multiple of kMr)
constexpr int64_t kChunk = 8;      // panels per chunk: gy^T rows of 256 positions
constexpr int64_t kParallelMacs = 1 << 20;
constexpr int64_t kGyBudget = int64_t(16) << 20;  // bytes of gathered gy^T per image group
// Few rows k (1x1 layers): the positions are split into kShares fixed shares, each summed
// into its own gw^T and those added in order at the end, so that the threads stay busy
// (5 blocks of 12 rows over 2 threads had left one waiting a third of the time) and the
// result still does not depend on the number of threads.
constexpr int64_t kShareMaxDepth = 8 * kMr;
constexpr int64_t kShares = 8;
static_assert(kCr == kNr, "gy^T rows are padded to whole register blocks");

void kernel_generic(const float* b, int64_t ldp, const int64_t* nvalid, int64_t npanels,
                    const float* at, float* acc, int64_t ldacc) {
    float sum[kMr][kCr] = {};
    for (int64_t pn = 0; pn < npanels; ++pn)
        for (int64_t l = 0; l < nvalid[pn]; ++l, at += kCr) {
            const float* bl = b + pn * ldp + l;
            for (int64_t r = 0; r < kMr; ++r) {
                const float br = bl[r * kNr];
                for (int64_t c = 0; c < kCr; ++c) sum[r][c] += br * at[c];
            }
        }
    for (int64_t r = 0; r < kMr; ++r)
        for (int64_t c = 0; c < kCr; ++c) acc[r * ldacc + c] += sum[r][c];
}

void gather_generic(const float* gy, int64_t co, int64_t positions, const int64_t* image,
                    const int64_t* p0, const int64_t* nvalid, int64_t npanels, float* at,
                    int64_t ldblock) {
    int64_t s = 0;
    for (int64_t i = 0; i < npanels; ++i) {
        const float* src = gy + image[i] * co * positions + p0[i];
        for (int64_t l = 0; l < nvalid[i]; ++l, ++s)
            for (int64_t c = 0; c < (co + kCr - 1) / kCr * kCr; ++c)
                at[c / kCr * ldblock + s * kCr + c % kCr] = c < co ? src[c * positions + l] : 0.0f;
    }
}

void pointwise_generic(const float* const* g, const float* const* x, int64_t len, bool first,
                       float* acc) {
    for (int64_t i = 0; i < kPwMo; ++i)
        for (int64_t j = 0; j < kPwMc; ++j) {
            float* a = acc + (i * kPwMc + j) * kPwLanes;
            if (first) std::fill(a, a + kPwLanes, 0.0f);
            for (int64_t p = 0; p < len; ++p) a[p % kPwLanes] += g[i][p] * x[j][p];
        }
}

float* aligned64(float* p) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<float*>((at + 63) & ~uintptr_t(63));
}

// What every thread of one call shares.
struct Plan {
    WgradKernel kernel;
    WgradGather gather;
    ConvGemmPack pack;
    const float* x;
    const float* gy;
    const Conv2dGeometry* g;
    int64_t co, positions, depth, per_image, co_padded, plane, blocks;
    int64_t ranges;  // of rows k, one per task of a share
    int64_t shares;  // of each image group's chunks (up to kShares, or 1)
    int64_t group;   // images per group: its gy^T stays under kGyBudget (at least one)
};

// A chunk of panels of the image group from n0: where its panels lie.
struct Chunk {
    int64_t np, image[kChunk], p0[kChunk], nvalid[kChunk];
};

Chunk chunk_at(const Plan& p, int64_t c0, int64_t panels, int64_t n0) {
    Chunk ch;
    ch.np = panels - c0 < kChunk ? panels - c0 : kChunk;
    for (int64_t i = 0; i < ch.np; ++i) {
        ch.image[i] = n0 + (c0 + i) / p.per_image;
        ch.p0[i] = (c0 + i) % p.per_image * kNr;
        ch.nvalid[i] = p.positions - ch.p0[i] < kNr ? p.positions - ch.p0[i] : kNr;
    }
    return ch;
}

// Row s of the group's gy^T where the chunk's first position lies.
int64_t first_row(const Plan& p, const Chunk& ch, int64_t n0) {
    return (ch.image[0] - n0) * p.positions + ch.p0[0];
}

// Rows [k0, k1) of gw^T += the contribution of the group's panels [c_begin, c_end) (whole
// chunks); acc (rows x co_padded).
void run_task(const Plan& p, int64_t k0, int64_t k1, int64_t n0, int64_t nb, int64_t c_begin,
              int64_t c_end, const float* gyt, float* acc, float* bbuf) {
    const int64_t panels = nb * p.per_image, ldblock = nb * p.positions * kCr;
    for (int64_t kb0 = k0; kb0 < k1; kb0 += kKb) {
        const int64_t kb = k1 - kb0 < kKb ? k1 - kb0 : kKb;
        const int64_t kbp = (kb + kMr - 1) / kMr * kMr, ldp = kbp * kNr;
        for (int64_t c0 = c_begin; c0 < c_end; c0 += kChunk) {
            const Chunk ch = chunk_at(p, c0, panels, n0);
            for (int64_t i = 0; i < ch.np; ++i) {
                ConvGemmSegment seg[kNr];
                const int64_t nseg =
                    conv_gemm_segments(ch.p0[i], ch.nvalid[i], p.g->out_w(), seg);
                float* panel = bbuf + i * ldp;
                p.pack(p.x + ch.image[i] * p.plane, *p.g, seg, nseg, ch.nvalid[i], kb0, kb,
                       panel);
                std::memset(panel + kb * kNr, 0, sizeof(float) * (kbp - kb) * kNr);
            }
            const float* at = gyt + first_row(p, ch, n0) * kCr;
            for (int64_t cb = 0; cb < p.co_padded; cb += kCr)
                for (int64_t r0 = 0; r0 < kbp; r0 += kMr)
                    p.kernel(bbuf + r0 * kNr, ldp, ch.nvalid, ch.np, at + cb / kCr * ldblock,
                             acc + (kb0 - k0 + r0) * p.co_padded + cb, p.co_padded);
        }
    }
}

// The kernels for the ISA in use (the family's one ISA decision): `gather_wide`, AVX-512's
// gather (null below), indexes channels with 32-bit offsets; `gather` takes the rest.
struct WgradKernels {
    WgradKernel kernel;
    WgradGather gather_wide;
    WgradGather gather;
    WgradPointwiseKernel pointwise;
};

void fill_wgrad(WgradKernels& k, Isa isa) {
    if (isa >= Isa::avx512) {
        k = {conv_wgrad_kernel_avx512(), conv_wgrad_gather_avx512(), conv_wgrad_gather_avx2(),
             conv_wgrad_pointwise_avx512()};
    } else if (isa >= Isa::avx2) {
        k = {conv_wgrad_kernel_avx2(), nullptr, conv_wgrad_gather_avx2(),
             conv_wgrad_pointwise_avx2()};
    } else {
        k = {kernel_generic, nullptr, gather_generic, pointwise_generic};
    }
}

Dispatch<WgradKernels> kernels(fill_wgrad);

Plan make_plan(const float* x, const float* gy, int64_t co, const Conv2dGeometry& g) {
    const WgradKernels& k = kernels();
    const bool wide = k.gather_wide && co * g.out_h() * g.out_w() < (int64_t(1) << 31);
    Plan p{k.kernel, wide ? k.gather_wide : k.gather, conv_gemm_pack(), x, gy, &g, co};
    p.positions = g.out_h() * g.out_w();
    p.depth = g.c * g.kh * g.kw;
    p.per_image = (p.positions + kNr - 1) / kNr;
    p.co_padded = (co + kCr - 1) / kCr * kCr;
    p.plane = g.c * g.h * g.w;
    p.blocks = (p.depth + kMr - 1) / kMr;
    const int64_t threads = omp_get_max_threads();
    // no more shares than one image group has chunks (batch 1 on 7x7: one chunk)
    int64_t group = kGyBudget / (p.positions * p.co_padded * int64_t(sizeof(float)));
    group = group < 1 ? 1 : (group > g.n ? g.n : group);
    const int64_t chunks = (group * p.per_image + kChunk - 1) / kChunk;
    p.shares = p.depth > kShareMaxDepth ? 1 : chunks < kShares ? chunks : kShares;
    p.group = group;
    const int64_t want = (threads + p.shares - 1) / p.shares;  // ranges per share
    p.ranges = p.blocks < want ? p.blocks : want;
    return p;
}

// The pointwise path (conv_gemm.h): each task owns a range of blocks of kPwMo rows o and one
// of kPwShares fixed shares of the chunks (image, run of positions), summed into its own
// vectors of partial sums; the shares and their lanes are added in order at the end, so the
// result does not depend on the number of threads.
constexpr int64_t kPwShares = 8;
constexpr int64_t kPwChunkBytes = 256 << 10;  // x's and gy's rows of one chunk
constexpr int64_t kPwMinPlane = 56 * 56;
constexpr int64_t kPwMaxNarrow = 32;
constexpr int64_t kPwMaxWeights = 1 << 14;  // 8 shares of 64 bytes a weight: 8 MB

// Where the dot products beat the gather-and-pack kernel, whose k rows come in blocks of 12
// and whose gather costs as much per output channel whatever the depth: maps of >= 56x56
// with <= 32 channels on one side; level with more channels, slower at 28x28 (3 chunks an
// image: the partial sums' traffic tells). bench/RESULTS.md, training.
bool pointwise_path(const Conv2dGeometry& g, int64_t co) {
    return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pb == 0 &&
           g.pl == 0 && g.pr == 0 && g.h * g.w >= kPwMinPlane &&
           std::min(g.c, co) <= kPwMaxNarrow && g.c * co <= kPwMaxWeights;
}

void pointwise_weight_grad(const float* x, const float* gy, int64_t co, const Conv2dGeometry& g,
                           float* gw) {
    const WgradPointwiseKernel kernel = kernels().pointwise;
    const int64_t c = g.c, positions = g.h * g.w, oblocks = (co + kPwMo - 1) / kPwMo;
    const int64_t cblocks = (c + kPwMc - 1) / kPwMc, tile = kPwMo * kPwMc * kPwLanes;
    // chunks of equal length (a multiple of 16) that fit kPwChunkBytes, at least 256
    const int64_t fit = std::max<int64_t>(kPwChunkBytes / (int64_t(sizeof(float)) * (c + co)), 256);
    const int64_t per_image = (positions + fit - 1) / fit, units = g.n * per_image;
    const int64_t len = ((positions + per_image - 1) / per_image + 15) / 16 * 16;
    const int64_t shares = std::min(kPwShares, units), threads = omp_get_max_threads();
    const int64_t ranges = std::min(oblocks, (threads + shares - 1) / shares);
    const int64_t share_size = oblocks * cblocks * tile;
    // the caller's grow-only scratch; each share's first chunk stores its sums (no zero fill)
    static thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>(shares * share_size + len))
        scratch.resize(static_cast<size_t>(shares * share_size + len));
    float* const acc = scratch.data();
    const float* const zeros = acc + shares * share_size;  // rows past co or c (len floats)
    std::fill(acc + shares * share_size, acc + shares * share_size + len, 0.0f);
    const bool parallel = g.n * co * positions * c >= kParallelMacs && threads > 1;
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < shares * ranges; ++t) {
            const int64_t share = t / ranges, range = t % ranges;
            const int64_t ob0 = oblocks * range / ranges, ob1 = oblocks * (range + 1) / ranges;
            float* const sacc = acc + share * share_size;
            const int64_t u0 = units * share / shares;
            for (int64_t u = u0; u < units * (share + 1) / shares; ++u) {
                const int64_t n = u / per_image, p0 = u % per_image * len;
                const int64_t l = std::min(len, positions - p0);
                const float* xr[kPwMc];
                const float* gr[kPwMo];
                for (int64_t ob = ob0; ob < ob1; ++ob) {
                    for (int64_t i = 0; i < kPwMo; ++i) {
                        const int64_t o = ob * kPwMo + i;
                        gr[i] = o < co ? gy + (n * co + o) * positions + p0 : zeros;
                    }
                    for (int64_t cb = 0; cb < cblocks; ++cb) {
                        for (int64_t j = 0; j < kPwMc; ++j) {
                            const int64_t k = cb * kPwMc + j;
                            xr[j] = k < c ? x + (n * c + k) * positions + p0 : zeros;
                        }
                        kernel(gr, xr, l, u == u0, sacc + (ob * cblocks + cb) * tile);
                    }
                }
            }
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < oblocks * cblocks; ++t) {  // shares, then lanes, in order
            float* const sum = acc + t * tile;
            for (int64_t share = 1; share < shares; ++share) {
                const float* part = acc + share * share_size + t * tile;
                for (int64_t i = 0; i < tile; ++i) sum[i] += part[i];
            }
            for (int64_t i = 0; i < kPwMo; ++i)
                for (int64_t j = 0; j < kPwMc; ++j) {
                    const int64_t o = t / cblocks * kPwMo + i, k = t % cblocks * kPwMc + j;
                    const float* lanes = sum + (i * kPwMc + j) * kPwLanes;
                    float total = 0.0f;
                    for (int64_t lane = 0; lane < kPwLanes; ++lane) total += lanes[lane];
                    if (o < co && k < c) gw[o * c + k] = total;
                }
        }
    }
}

}  // namespace

void conv_gemm_weight_grad(const float* x, const float* gy, int64_t co, const Conv2dGeometry& g,
                           float* gw) {
    if (pointwise_path(g, co)) return pointwise_weight_grad(x, gy, co, g, gw);
    const Plan p = make_plan(x, gy, co, g);
    const int64_t threads = omp_get_max_threads(), tasks = p.ranges * p.shares;
    const int64_t group = p.group;
    // every element of a group's rows is written by the gather: no zero fill
    const std::unique_ptr<float[]> gyt(new float[group * p.positions * p.co_padded]);
    std::vector<std::vector<float>> acc(static_cast<size_t>(tasks));
    const auto rows_of = [&](int64_t range, int64_t* k0, int64_t* k1) {
        *k0 = p.blocks * range / p.ranges * kMr;
        *k1 = std::min(p.blocks * (range + 1) / p.ranges * kMr, p.depth);
    };
    const bool parallel = g.n * co * p.positions * p.depth >= kParallelMacs && threads > 1;
#pragma omp parallel if (parallel)
    {
        std::vector<float> bstore(static_cast<size_t>(kChunk * kKb * kNr + 16));
        float* const bbuf = aligned64(bstore.data());  // the packer stores aligned rows
        for (int64_t n0 = 0; n0 < g.n; n0 += group) {
            const int64_t nb = g.n - n0 < group ? g.n - n0 : group, panels = nb * p.per_image;
#pragma omp for schedule(static)
            for (int64_t c0 = 0; c0 < panels; c0 += kChunk) {
                const Chunk ch = chunk_at(p, c0, panels, n0);
                p.gather(gy, co, p.positions, ch.image, ch.p0, ch.nvalid, ch.np,
                         gyt.get() + first_row(p, ch, n0) * kCr, nb * p.positions * kCr);
            }  // implicit barrier: the group's gy^T is complete
            const int64_t chunks = (panels + kChunk - 1) / kChunk;
#pragma omp for schedule(static)
            for (int64_t t = 0; t < tasks; ++t) {
                const int64_t share = t / p.ranges;
                int64_t k0, k1;
                rows_of(t % p.ranges, &k0, &k1);
                if (n0 == 0) acc[t].assign(static_cast<size_t>(
                                 (k1 - k0 + kMr - 1) / kMr * kMr * p.co_padded), 0.0f);
                run_task(p, k0, k1, n0, nb, chunks * share / p.shares * kChunk,
                         std::min(chunks * (share + 1) / p.shares * kChunk, panels), gyt.get(),
                         acc[t].data(), bbuf);
            }  // implicit barrier: gy^T is reused by the next group
        }
#pragma omp for schedule(static)
        for (int64_t range = 0; range < p.ranges; ++range) {  // the shares' gw^T -> gw
            int64_t k0, k1;
            rows_of(range, &k0, &k1);
            float* const sum = acc[range].data();
            for (int64_t share = 1; share < p.shares; ++share) {
                const float* part = acc[share * p.ranges + range].data();
                for (int64_t i = 0; i < (k1 - k0) * p.co_padded; ++i) sum[i] += part[i];
            }
            for (int64_t c = 0; c < co; ++c)
                for (int64_t k = k0; k < k1; ++k)
                    gw[c * p.depth + k] = sum[(k - k0) * p.co_padded + c];
        }
    }
}

}  // namespace tianyuan
