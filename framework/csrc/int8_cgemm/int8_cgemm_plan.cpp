// The packed int8 convolution's plan and block work (declared in int8_cgemm_plan.h): the
// plan of a call, packing a block's activations (gathered from the padded input or copied
// from quad planes), the weight blocks over a block, and the per-image path.
#include "int8_cgemm/int8_cgemm_plan.h"

#include <omp.h>

#include <cstring>
#include <vector>

#include "int8_cgemm/int8_cgemm_blocks.h"
#include "int8_conv/int8_conv_kernels.h"

namespace tianyuan {
namespace int8 {

// Shallow layers with large outputs run kRunBlocks position blocks a task, the weight blocks
// outer, so that each output row is written kRunBlocks * kPos bytes in a row rather than
// every row 64 bytes a block: such layers (MobileNetV2's 16 -> 96 at batch 16) had stalled on
// their stores; outputs under kRunMinOutput lose (bench/RESULTS.md, int8 kernels: AVX2).
constexpr int64_t kRunBlocks = 8, kRunMaxDepth = 64, kRunMinOutput = int64_t{1} << 23;

bool own_blocks_wins(const ConvGeom& g, int64_t oblocks, int64_t threads) {
    const int64_t p = g.oh * g.ow, k = g.c * g.kh * g.kw;
    return g.n == 1 && g.groups == 1 && threads > 1 && threads <= kOwnBlocksMaxThreads &&
           oblocks >= 2 * threads &&
           (p <= kPos || (p <= 16 * kPos && g.oc >= k));
}

// amx: the blocks' products run on AMX tiles (amx_gemm_block), channels kAmxOc a block.
ConvPlan plan(const QIn& x, const ConvGeom& g, bool narrow, bool amx) {
    ConvPlan s;
    s.hp = g.h + g.pt + g.pb;
    s.wp = g.w + g.pl + g.pr;
    s.cg = g.c / g.groups;
    s.ocg = g.oc / g.groups;
    s.kg = s.cg * g.kh * g.kw;
    s.kp = round_up(s.kg, kGroup);
    s.p = g.oh * g.ow;
    const int64_t unit = amx ? kAmxOc : kOcBlock, oblocks = (s.ocg + unit - 1) / unit;
    const int64_t threads = omp_get_max_threads();
    s.own_blocks = !amx && own_blocks_wins(g, oblocks, threads);
    // own blocks: uniform blocks, the threads splitting the channels instead
    s.start = block_starts(g.n * s.p, s.own_blocks ? 1 : threads);
    s.blocks = static_cast<int64_t>(s.start.size()) - 1;
    s.from_quads = direct_takes(g) && g.kh * g.kw > 1;
    if (s.from_quads) {
        s.quads = quad_input(g, flip_of(x), static_cast<uint8_t>(zero_of(x)));  // planes: conv2d
        s.qpack = conv_kernels().pack_quads;
        s.xpad = s.xend = nullptr;
    } else {
        s.xpad = s.xend = nullptr;  // conv2d: the batch's padded input, or packed_images' own
        // k row q's offset in a padded group, in k_row's order, from nested loops, not k_row's
        // 3 integer divisions a row (deep 1x1 layers had paid for them)
        const int64_t taps = g.kh * g.kw, plane = s.hp * s.wp;
        std::vector<int64_t> tap_off(static_cast<size_t>(taps));
        for (int64_t t = 0; t < taps; ++t) tap_off[t] = t / g.kw * g.dh * s.wp + t % g.kw * g.dw;
        s.koff.resize(static_cast<size_t>(s.kg));
        int64_t* koff = s.koff.data();
        if (quad_order(s.cg)) {
            for (int64_t c0 = 0; c0 < s.cg; c0 += 4)
                for (int64_t t = 0; t < taps; ++t)
                    for (int64_t i = 0; i < 4; ++i) *koff++ = (c0 + i) * plane + tap_off[t];
        } else {
            for (int64_t c = 0; c < s.cg; ++c)
                for (int64_t t = 0; t < taps; ++t) *koff++ = c * plane + tap_off[t];
        }
    }
    s.qoff.resize(static_cast<size_t>(s.kp / kGroup));
    for (int64_t q = 0; q < s.kp / kGroup; ++q) s.qoff[q] = q * kPos * kGroup;
    // Few position blocks (batch 1, small maps): also split the output channels.
    const int64_t tasks = g.groups * s.blocks, want = 2 * threads;
    s.chunks = tasks >= want ? 1 : (want + tasks - 1) / tasks;
    // A few more blocks than threads leave threads idle at the end (13 blocks on 2 threads:
    // 7 and 6): split the channels too until the last round is nearly full.
    while (s.chunks < oblocks && tasks * s.chunks < 16 * threads &&
           20 * round_up(tasks * s.chunks, threads) > 21 * tasks * s.chunks) {
        ++s.chunks;
    }
    s.chunks = s.chunks < oblocks ? s.chunks : oblocks;
    s.ob_per_chunk = (oblocks + s.chunks - 1) / s.chunks;
    s.pack = conv_kernels().pack_block;
    s.tile = cgemm_tile(narrow);
    if (!amx && s.chunks == 1 && s.kp <= kRunMaxDepth && g.n * g.oc * s.p >= kRunMinOutput &&
        s.blocks >= 16 * kRunBlocks * threads) {
        s.run = kRunBlocks;
    }
    return s;
}

// Weight blocks [ob0, ob1) of group gi over the packed activation block blk. A block inside
// one image is written in place; one that spans images goes through a staging tile.
void run_tiles(const ConvPlan& s, const ConvGeom& g, const int8_t* packed,
               const std::vector<int32_t>& b, const Requant& r, const uint8_t* buf, int64_t gi,
               int64_t blk, int64_t ob0, int64_t ob1, uint8_t* out, AmxGemmState& st) {
    const int64_t p0 = s.start[blk], npos = s.start[blk + 1] - p0;
    Span spans[kPos];
    const int64_t nspans = block_spans(s.p, p0, npos, spans);
    const int64_t c0 = gi * s.ocg;
    // the AMX blocks and the VNNI tile store every span by masked stores, other tiles through
    // a staging tile where the block spans images
    const bool segmented = s.amx || (nspans > 1 && s.tile == cgemm_tile_vnni);
    StoreSeg segs[kPos];
    for (int64_t t = 0; t < nspans && segmented; ++t)
        segs[t] = store_seg(spans[t].n * g.oc * s.p + spans[t].q, spans[t].lane, spans[t].len);
    if (s.amx) {  // channels [ob0, ob1) * kAmxOc (groups 1)
        const auto gemm = s.amx_emulate ? amx_gemm_block_emulated : amx_gemm_block_tiles;
        const int64_t j0 = ob0 * kAmxOc, j1 = ob1 * kAmxOc < g.oc ? ob1 * kAmxOc : g.oc;
        if (j0 < j1) {
            gemm(buf, s.amx_chunks, s.amx, j0, j1, npos, RowParams{b.data(), r.multiplier, r.shift},
                 r, out, s.p, segs, static_cast<int>(nspans), st);
        }
        return;
    }
    const int64_t ahead = store_ahead(g.n * g.oc * s.p);
    alignas(64) uint8_t stage[kOcBlock * kPos];
    for (int64_t ob = ob0; ob < ob1; ++ob) {
        const int64_t j = ob * kOcBlock;
        if (j >= s.ocg) break;
        const int64_t rows = s.ocg - j < kOcBlock ? s.ocg - j : kOcBlock;
        const RowParams q{b.data() + c0 + j, r.multiplier + c0 + j, r.shift + c0 + j,
                          s.res_ptr ? s.res_ptr + c0 + j : nullptr, s.res,
                          s.chans ? s.chans + (c0 + j) * kChanBytes : nullptr,
                          segmented ? segs : nullptr, segmented ? nspans : 0, ahead};
        const int8_t* w = packed + gi * s.ocg * s.kp + j * s.kp;
        const auto tile = [&](uint8_t* dst, int64_t ldo) {
            if (s.wide) {  // 4 packed bytes -> 2 words
                cgemm_tile_avx2_wide(buf, s.qoff.data(), s.wide + (w - packed) / 2, s.kp, rows,
                                     npos, q, r, dst, ldo);
            } else {
                s.tile(buf, s.qoff.data(), w, s.kp, rows, npos, q, r, dst, ldo);
            }
        };
        if (nspans == 1) {
            tile(out + (spans[0].n * g.oc + c0 + j) * s.p + spans[0].q, s.p);
            continue;
        }
        if (segmented) {
            tile(out + (c0 + j) * s.p, s.p);
            continue;
        }
        tile(stage, kPos);
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t t = 0; t < nspans; ++t)
                std::memcpy(out + (spans[t].n * g.oc + c0 + j + i) * s.p + spans[t].q,
                            stage + i * kPos + spans[t].lane, static_cast<size_t>(spans[t].len));
    }
}

// All packed weights (bytes, a multiple of 4) widened for the AVX2 tile, as an orphaned
// `omp for`: inside a parallel region, its threads share the work.
void widen_all(const int8_t* packed, int64_t bytes, int32_t* wide) {
    constexpr int64_t kChunk = 1 << 14;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < bytes; c += kChunk) {
        const int64_t n = bytes - c < kChunk ? bytes - c : kChunk;
        widen_weights_avx2(packed + c, n / kGroup, wide + c / 2);
    }
}

// Activation block blk of group gi, k-quads [q0, q1) only, from the batch's quad planes or
// padded input, or from a thread's ring of images (ring.base not null).
void pack_part(const ConvPlan& s, const ConvGeom& g, int64_t gi, int64_t blk, int64_t q0,
               int64_t q1, uint8_t* buf, const Ring& ring) {
    Span spans[kPos];
    Run runs[kPos + 2];
    const int64_t p0 = s.start[blk], npos = s.start[blk + 1] - p0;
    const int64_t nspans = block_spans(s.p, p0, npos, spans);
    for (int64_t t = 0; t < nspans && ring.base; ++t) spans[t].n %= ring.slots;
    if (s.from_quads) {
        const QuadInput& in = s.quads;
        const int64_t nr = block_runs(g, g.groups * in.group_quads, in.qp.wph, 1, spans, nspans,
                                      runs);
        s.qpack((ring.base ? ring.base : in.planes) + gi * in.group_quads * kGroup,
                in.qoff.data() + q0, q1 - q0, runs, nr, buf + q0 * kPos * kGroup);
        return;
    }
    const int64_t nr = block_runs(g, g.c * s.hp * s.wp, g.sh * s.wp, g.sw, spans, nspans, runs);
    const int64_t k0 = q0 * kGroup, kend = s.kg < q1 * kGroup ? s.kg : q1 * kGroup;
    s.pack((ring.base ? ring.base : s.xpad) + gi * s.cg * s.hp * s.wp,
           ring.base ? ring.end : s.xend, s.koff.data() + k0, kend - k0, (q1 - q0) * kGroup,
           runs, nr, g.sw, buf + k0 * kPos);
}

// Blocks from quad planes or a padded copy with several images a thread (the batch 2 or more
// images a thread, one channel chunk, a block at a time, not AMX): each thread takes an even
// share of the blocks in order and rewrites the images they cover, as they come, into a ring
// of its own (as many images as a block spans; the same bytes every few images, so they stay
// in its L2), asking meanwhile for the next image's input (prefetcht1) a slice a block, as
// direct_images does (int8_conv_direct.cpp). An image at the edge of two threads' shares is
// rewritten by both. The batch's planes or padded copy, written first and shared, had gone
// through L3 both ways (bench/RESULTS.md, int8 kernels: the planes one image at a time).
void packed_images(const ConvPlan& s, const ConvGeom& g, const QIn& x, const int8_t* packed,
                   const std::vector<int32_t>& b, const Requant& r, uint8_t* out) {
    const int64_t me = omp_get_thread_num(), threads = omp_get_num_threads();
    const int64_t b0 = s.blocks * me / threads, b1 = s.blocks * (me + 1) / threads;
    if (b0 >= b1) return;
    Ring ring;
    ring.slots = (kPos - 2) / s.p + 2;
    ring.image = s.from_quads ? g.groups * s.quads.group_quads * kGroup : g.c * s.hp * s.wp;
    const int64_t size = ring.slots * ring.image + 2 * kPos;  // the gather's slack
    ring.base = thread_space(s.from_quads ? Space::quads : Space::pad, size);
    ring.end = ring.base + size;
    uint8_t* buf = thread_space(Space::block, s.kp * kPos);
    const int64_t bytes = g.c * g.h * g.w;  // an image's input
    const int64_t last = (s.start[b1] - 1) / s.p;
    int64_t done = s.start[b0] / s.p - 1;  // the last image in the ring
    AmxGemmState st;
    for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t p0 = s.start[blk], p1 = s.start[blk + 1];
        for (; done < (p1 - 1) / s.p; ++done) {
            uint8_t* slot = ring.base + (done + 1) % ring.slots * ring.image;
            if (s.from_quads) {
                fill_image_planes(x.data, g, s.quads, done + 1, slot);
            } else {
                pad_image(x, g, s.hp, s.wp, done + 1, slot);
            }
        }
        if (done < last) {  // the block's share of the next image's input
            const int64_t at = p0 / s.p * s.p, lo = (p0 - at) * bytes / s.p;
            const int64_t hi = (p1 - at) * bytes / s.p < bytes ? (p1 - at) * bytes / s.p : bytes;
            prefetch_input(x.data + (done + 1) * bytes, lo, hi);
        }
        for (int64_t gi = 0; gi < g.groups; ++gi) {
            pack_part(s, g, gi, blk, 0, s.kp / kGroup, buf, ring);
            run_tiles(s, g, packed, b, r, buf, gi, blk, 0, s.ob_per_chunk, out, st);
        }
    }
}

}  // namespace int8
}  // namespace tianyuan
