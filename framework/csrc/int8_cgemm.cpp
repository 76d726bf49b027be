// int8 convolution driver (layouts in int8_cgemm.h): pad the input once with the zero
// point (or, for kernels of 2 or more taps with C/groups % 4 == 0, rewrite it into quad
// planes), then per (group, block of <= kPos positions of the whole batch: a block may span
// images) pack the block's activations and run the weight blocks over it; each tile
// requantizes and writes NCHW bytes directly (where the block spans images, the VNNI tile by
// a masked store per image, StoreSeg, the others through a staging tile).
// The padding and the position blocks' geometry are in int8_cgemm_blocks.cpp; the weight
// packer, the generic pack and tile and the per-thread scratch in int8_cgemm_generic.cpp;
// SIMD twins in int8_cgemm_avx2.cpp (the AVX2 packing in int8_pack_avx2.cpp) / _avx512.cpp /
// _vnni.cpp.
#include <omp.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu.h"
#include "int8_amx.h"
#include "int8_cgemm.h"
#include "int8_cgemm_blocks.h"
#include "int8_ops.h"

namespace tianyuan {
namespace int8 {

namespace {

using PackFn = void (*)(const uint8_t*, const uint8_t*, const int64_t*, int64_t, int64_t,
                        const Run*, int64_t, int64_t, uint8_t*);

using QuadPackFn = void (*)(const uint8_t*, const int64_t*, int64_t, const Run*, int64_t,
                           uint8_t*);

// Blocks gather from the padded input (xpad, koff, pack) or, for kernels of 2 or more taps
// with C/groups % 4 == 0, copy from the quad planes (quads, qpack): the planes are one
// interleaving pass over the input, and a block's k-quads are then plain copies of runs,
// where gathering interleaves 4 input rows per k-quad of every block (9 times per input byte
// for a 3x3 kernel).
struct ConvPlan {
    bool from_quads;
    QuadInput quads;
    QuadPackFn qpack;
    const uint8_t* xpad;
    const uint8_t* xend;  // xpad's readable end
    int64_t hp, wp, cg, ocg, kg, kp, p, blocks, chunks, ob_per_chunk;
    std::vector<int64_t> start;  // (blocks + 1,): block b is positions [start[b], start[b + 1])
    std::vector<int64_t> koff;   // (kg,) offsets of k's (c, i, j) in a padded group
    std::vector<int64_t> qoff;   // (kp / 4,) k-quad q's panels in a packed block
    PackFn pack;
    CTileFn tile;
    const int32_t* res_ptr = nullptr;  // the narrow form's residual (NarrowWeights), or null
    const int32_t* res = nullptr;
    const uint8_t* chans = nullptr;  // the tile's channel table (chans_space), or null
    int64_t run = 1;  // position blocks a task packs before its tiles (kRunBlocks)
    // The AVX2 tile's weights widened once for the call (widen_all) where kWideMinBlocks or
    // more position blocks reuse them and rows are kWideMinDepth deep or more or all of them
    // widen to kWideMaxSmall bytes or fewer, else null (the tile widens its block's itself).
    const int32_t* wide = nullptr;
    // The blocks' products on AMX tiles instead (amx_gemm_block; ConvAlgo::packed_amx): the
    // weights in its layout, K's chunks, and whether the tiles are emulated.
    const int8_t* amx = nullptr;
    int64_t amx_chunks = 0;
    bool amx_emulate = false;
};

// ResNet-18's 3x3 layers on Zen 3 at batch 1, interleaved against per-tile widening (4-5 % of
// their samples): 14 to 49 blocks (28x28, 56x56) 0.88-0.98x the time; 2 and 4 blocks (7x7,
// 14x14) 1.02-1.12x, where the widened copy (twice the bytes) is read back from L2 / L3
// while a tile's own stays in L1; the stem (148 deep) and 1x1 layers (64-256) 1.04-1.08x.
// Small weights widened stay in L1 as a tile's own do, and the tiles skip their widening:
// MobileNetV2's 32 -> 16 1x1 layer at batch 16 1.44-1.46 -> 1.38-1.39 ms (8-bit weights, Zen
// 3). The 10 % of its 16 -> 96 layer that `perf` had put in the per-tile widening was mostly
// a wait on the output's stores (the whole layer's stall: 96 rows of NCHW bytes written 64
// at a time), which moved into the tile.
constexpr int64_t kWideMinBlocks = 8, kWideMinDepth = 512, kWideMaxSmall = 8192;

// Shallow layers with large outputs run kRunBlocks position blocks a task, the weight blocks
// outer, so that each output row is written kRunBlocks * kPos bytes in a row rather than
// every row 64 bytes a block: MobileNetV2's 16 -> 96 1x1 layer at batch 16 (19 MB of output,
// 96 rows written at once) had stalled on its stores; 4.97-5.43 -> 4.20-4.32 ms on Zen 3. Its
// 32 -> 16 and 24 / 32 -> 144 layers (2-7 MB) were 3-5 % slower so.
constexpr int64_t kRunBlocks = 8, kRunMaxDepth = 64, kRunMinOutput = int64_t{1} << 23;

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
    s.start = block_starts(g.n * s.p, omp_get_max_threads());
    s.blocks = static_cast<int64_t>(s.start.size()) - 1;
    s.from_quads = direct_takes(g) && g.kh * g.kw > 1;
    if (s.from_quads) {
        s.quads = quad_input(g, flip_of(x), static_cast<uint8_t>(zero_of(x)));  // planes: conv2d
        s.qpack = current_isa() >= Isa::avx512 ? pack_quads_avx512
                  : current_isa() >= Isa::avx2  ? pack_quads_avx2 : pack_quads_generic;
        s.xpad = s.xend = nullptr;
    } else {
        s.xpad = s.xend = nullptr;  // conv2d: the batch's padded input, or packed_images' own
        // k row q's offset in a padded group, in k_row's order, from nested loops: k_row's 3
        // integer divisions a row had cost a 1x1 layer of 2048 channels 8 us a call
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
    const int64_t unit = amx ? kAmxOc : kOcBlock, oblocks = (s.ocg + unit - 1) / unit;
    const int64_t threads = omp_get_max_threads();
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
    s.pack = current_isa() >= Isa::avx512 ? pack_block_avx512
             : current_isa() >= Isa::avx2 ? pack_block_avx2 : pack_block_generic;
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

// A thread's ring of images (packed_images): image n's quad planes or padded input at
// base + n % slots * image; bytes up to `end` readable.
struct Ring {
    uint8_t* base = nullptr;
    int64_t slots = 0, image = 0;
    const uint8_t* end = nullptr;
};

// Activation block blk of group gi, k-quads [q0, q1) only, from the batch's quad planes or
// padded input, or from a thread's ring of images (ring.base not null).
void pack_part(const ConvPlan& s, const ConvGeom& g, int64_t gi, int64_t blk, int64_t q0,
               int64_t q1, uint8_t* buf, const Ring& ring = Ring{}) {
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
// through L3 both ways: ResNet-18's stride-2 3x3 layers at batch 16 took 0.93-0.97x their
// time so, its 7x7 stem 0.94-1.01x (median 0.96; Zen 5, 2 threads, alternating processes).
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

}  // namespace

void conv2d(const QIn& x, const ConvGeom& g, const int8_t* packed, const int32_t* row_sums,
            const int32_t* bias, const Requant& r, uint8_t* out, ConvAlgo algo,
            const int8_t* wamx, const NarrowWeights* narrow, const int8_t* wgemm) {
    if (algo == ConvAlgo::direct && !direct_takes(g)) {
        throw std::invalid_argument("int8_conv2d: the direct algorithm needs C/groups divisible"
                                    " by 4, got " + std::to_string(g.c / g.groups));
    }
    if (algo == ConvAlgo::amx &&
        (!amx_takes(g) || !wamx || !cpu_features().os_avx512 || !cpu_features().avx512vbmi)) {
        throw std::invalid_argument(
            "int8_conv2d: the amx algorithm needs groups 1, C a multiple of 64, OC of 32, "
            "weights packed for it and AVX-512 with VBMI; got C " + std::to_string(g.c) + ", OC " +
            std::to_string(g.oc) + ", groups " + std::to_string(g.groups));
    }
    if (algo == ConvAlgo::packed_amx &&
        (!amx_gemm_takes(g.groups) || !wgemm || !cpu_features().os_avx512)) {
        throw std::invalid_argument(
            "int8_conv2d: the packed_amx algorithm needs groups 1, weights packed for it and "
            "AVX-512; got groups " + std::to_string(g.groups) + ", AVX-512 " +
            (cpu_features().os_avx512 ? "yes" : "no") + ", weights " + (wgemm ? "yes" : "no"));
    }
    const std::vector<int32_t> b = corrected_bias(bias, row_sums, g.oc, zero_of(x));
    const bool gemm_amx = algo == ConvAlgo::packed_amx ||
                          (algo == ConvAlgo::automatic && current_isa() == Isa::amx && wgemm &&
                           amx_gemm_wins(g) && amx_verified());
    const NarrowWeights* nw = narrow && narrow_tile() && !gemm_amx ? narrow : nullptr;
    if (nw) packed = nw->packed;
    const bool real_amx = current_isa() == Isa::amx && wamx && amx_wins(g);
    if (algo == ConvAlgo::amx || (algo == ConvAlgo::automatic && real_amx && amx_verified())) {
        conv2d_amx(x.data, flip_of(x), static_cast<uint8_t>(zero_of(x)), g, wamx, b.data(), r,
                   out, !cpu_features().os_amx);
        return;
    }
    if (algo == ConvAlgo::direct || (algo == ConvAlgo::automatic && direct_wins(g))) {
        conv2d_direct(x.data, flip_of(x), static_cast<uint8_t>(zero_of(x)), g, packed, nw,
                      b.data(), r, out);
        return;
    }
    ConvPlan s = plan(x, g, nw != nullptr, gemm_amx);
    if (nw) {
        s.res_ptr = nw->res_ptr;
        s.res = nw->res;
    }
    if (gemm_amx) {
        s.amx_chunks = amx_gemm_chunks(s.kp);
        s.amx = wgemm;
        s.amx_emulate = !cpu_features().os_amx;
    }
    const bool tiles = s.amx && !s.amx_emulate;
    uint8_t* table = gemm_amx ? nullptr : chans_space(s.tile, s.blocks, g.oc);
    s.chans = table;
    const int64_t blocks = g.groups * s.blocks, quads = s.kp / kGroup;
    std::unique_ptr<int32_t[]> wide;
    if (!gemm_amx && s.tile == cgemm_tile_avx2 && s.blocks >= kWideMinBlocks &&
        (s.kp >= kWideMinDepth || g.oc * s.kp * 2 <= kWideMaxSmall)) {
        wide.reset(new int32_t[static_cast<size_t>(g.oc * s.kp / 2)]);
        s.wide = wide.get();
    }
    const bool images = (s.from_quads || needs_padding(x, g)) && s.chunks == 1 && s.run == 1 &&
                        !s.amx && g.n >= 2 * omp_get_max_threads();
    if (s.from_quads && !images) s.quads.planes = batch_planes(g, s.quads);
    if (!s.from_quads && !images) s.xpad = padded_input(x, g, s.hp, s.wp, &s.xend);
    if (images) {
#pragma omp parallel
        {
            if (s.wide) widen_all(packed, g.oc * s.kp, wide.get());
            if (table) fill_chans(b.data(), r.multiplier, r.shift, g.oc, r, table);
            packed_images(s, g, x, packed, b, r, out);
        }
        return;
    }
    if (s.chunks == 1) {  // enough position blocks: each task packs its own
#pragma omp parallel if (blocks > 1)
        {
            if (s.from_quads) fill_quad_planes(x.data, g, s.quads);
            if (s.wide) widen_all(packed, g.oc * s.kp, wide.get());
            if (table) fill_chans(b.data(), r.multiplier, r.shift, g.oc, r, table);
            // once a thread, not a block: its guard check had been 3 % of a 1x1 layer of
            // 144 -> 24 channels at 56x56 (49 blocks)
            const int64_t run = s.run, runs = (s.blocks + run - 1) / run;
            // the AMX tiles read the last chunk's quads past kp too
            const int64_t depth = s.amx ? s.amx_chunks * kAmxK : s.kp;
            uint8_t* buf = thread_space(Space::block, run * depth * kPos);
            AmxGemmState st;  // the AMX blocks' store, carried to the thread's next block
            if (tiles) amx_tiles_begin();
#pragma omp for schedule(static)
            for (int64_t t = 0; t < g.groups * runs; ++t) {
                const int64_t gi = t / runs, b0 = t % runs * run;
                const int64_t b1 = b0 + run < s.blocks ? b0 + run : s.blocks;
                for (int64_t blk = b0; blk < b1; ++blk)
                    pack_part(s, g, gi, blk, 0, quads, buf + (blk - b0) * s.kp * kPos);
                if (run == 1) {
                    run_tiles(s, g, packed, b, r, buf, gi, b0, 0, s.ob_per_chunk, out, st);
                    continue;
                }
                // weight blocks outer: each output row gets the run's positions in a row
                for (int64_t ob = 0; ob < s.ob_per_chunk; ++ob)
                    for (int64_t blk = b0; blk < b1; ++blk)
                        run_tiles(s, g, packed, b, r, buf + (blk - b0) * s.kp * kPos, gi, blk,
                                  ob, ob + 1, out, st);
            }
            if (s.amx) amx_gemm_flush(st);
            if (tiles) amx_tiles_end();
        }
        return;
    }
    // Few blocks (batch 1, small maps): pack them all once, split along k, then split
    // the output channels into chunks over the shared packed blocks (the AMX tiles read the
    // last block's quads past kp too).
    const int64_t slack = s.amx ? (s.amx_chunks * kAmxK - s.kp) * kPos : 0;
    uint8_t* all = thread_space(Space::blocks, blocks * s.kp * kPos + slack);
    const int64_t parts = s.chunks, per = (quads + parts - 1) / parts;
#pragma omp parallel
    {
        if (s.from_quads) fill_quad_planes(x.data, g, s.quads);
        if (s.wide) widen_all(packed, g.oc * s.kp, wide.get());
        if (table) fill_chans(b.data(), r.multiplier, r.shift, g.oc, r, table);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < blocks * parts; ++t) {
            const int64_t bt = t / parts, q0 = t % parts * per;
            const int64_t q1 = q0 + per < quads ? q0 + per : quads;
            if (q0 < q1) pack_part(s, g, bt / s.blocks, bt % s.blocks, q0, q1,
                                   all + bt * s.kp * kPos);
        }
        AmxGemmState st;
        if (tiles) amx_tiles_begin();
#pragma omp for schedule(static)
        for (int64_t t = 0; t < blocks * s.chunks; ++t) {
            const int64_t ch = t % s.chunks, bt = t / s.chunks;
            run_tiles(s, g, packed, b, r, all + bt * s.kp * kPos, bt / s.blocks, bt % s.blocks,
                      ch * s.ob_per_chunk, (ch + 1) * s.ob_per_chunk, out, st);
        }
        if (s.amx) amx_gemm_flush(st);
        if (tiles) amx_tiles_end();
    }
}

}  // namespace int8
}  // namespace tianyuan
