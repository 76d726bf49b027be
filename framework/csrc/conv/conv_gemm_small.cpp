// The direct GEMM convolution's plans for small maps (conv_gemm.h, ConvGemmPlan): stream
// (batch 1 on deep layers: w read once) and few-positions (vectors over output channels).
#include <cstdint>

#include "conv/conv_gemm_plans.h"

namespace tianyuan {
namespace conv_gemm_detail {
namespace {

constexpr int64_t kNr = kConvGemmNr, kMr = kConvGemmMr;
using Segment = ConvGemmSegment;

// The stream plan (batch 1 on deep layers: few panels, megabytes of weights). The default
// plan packs all of w up front (a read and a write of w, then reads of the packed copy) and
// reloads its partial sums every kKc rows; at batch 1 on 512 channels at 7x7 that took 2-2.5
// ms, where a plain copy of w takes 0.75. Here each work item packs its panels over the whole
// depth once (they stay in its L2), then packs one channel block of w at a time into a
// buffer that stays in L2 and runs it over those panels, the accumulators in registers
// through the whole depth: w is read from memory once per panel group.
constexpr int64_t kStreamBytes = 5 << 18;  // packed panels per work item (1.25 MiB)
constexpr int64_t kStreamPanels = 16;      // panels per work item at most

}  // namespace

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

namespace {

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

}  // namespace

void run_stream(const Plan& p, ConvGemmPackWeights pack_w, const float* w, bool parallel) {
    const int64_t per_item = (p.panels + p.groups - 1) / p.groups;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t item = 0; item < p.groups * p.splits; ++item) {
        const AlignedFloats panels(p.pointwise ? 0 : per_item * p.depth * kNr);
        const AlignedFloats wblock(p.depth * kMr);
        run_stream_item(p, pack_w, w, item, panels.data, wblock.data);
    }
}

// The few-positions plan (conv_gemm.h). A work item is a chunk of about kFewChunkPanels
// panels (224 positions) by a share of the kFewNr-channel blocks; per kFewKc reduction rows it
// packs its panels and one block of w at a time, its partial sums kept transposed in `acc`.
constexpr int64_t kFewKc = 128;           // 32 KiB of w per block: it stays in L1
constexpr int64_t kFewChunkPanels = 8;    // 128 KiB of panels at kFewKc rows (L2)
constexpr int64_t kFewBlocksPerPanel = kFewPanel / kFewMr;

constexpr int64_t kFewMaxPositions = 1024;

// Where the few-positions plan is taken: up to kFewMaxPositions positions in the batch, with
// more than 1024 reduction rows (3x3 layers from 128 channels) or >= 512 output channels from
// >= 128 (1x1 layers), and a channel block for every thread; and batches of 1x1 layers from
// >= 192 channels with more than 512 positions. 1x1 layers with fewer channels, 64 -> 128 3x3
// at 28x28 and the stems run slower on it (bench/RESULTS.md, fp32 kernels: the few-positions
// plan).
bool few_plan_wins(const Plan& p, int64_t threads) {
    const int64_t co_blocks = (p.co + kFewNr - 1) / kFewNr, all = p.g->n * p.positions;
    return all <= kFewMaxPositions && co_blocks >= threads &&
           (p.depth > 1024 || (p.co >= 512 && p.depth >= 128) ||
            (p.pointwise && all > 512 && p.depth >= 192));
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

}  // namespace conv_gemm_detail
}  // namespace tianyuan
