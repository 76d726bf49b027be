// int8 convolution driver (layouts in int8_cgemm.h): pad the input once with the zero
// point (or, for kernels of 2 or more taps with C/groups % 4 == 0, rewrite it into quad
// planes), then per (group, block of <= kPos positions of the whole batch: a block may span
// images) pack the block's activations and run the weight blocks over it; each tile
// requantizes and writes NCHW bytes directly (where the block spans images, the VNNI tile by
// a masked store per image, StoreSeg, the others through a staging tile).
// The plan and the block work are in int8_cgemm_plan.cpp; the padding and the position
// blocks' geometry in int8_cgemm_blocks.cpp; the weight packer, the generic pack and tile and
// the per-thread scratch in int8_cgemm_generic.cpp; SIMD twins in int8_cgemm_avx2.cpp (the
// AVX2 packing in int8_pack_avx2.cpp) / _avx512.cpp / _vnni.cpp.
#include <omp.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu.h"
#include "int8_amx/int8_amx.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_cgemm/int8_cgemm_blocks.h"
#include "int8_cgemm/int8_cgemm_plan.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

namespace {

// What every thread of a call's parallel region does first: the quad planes, the widened
// weights and the channel table, each an orphaned `omp for` (where the plan has them).
void prologue(const ConvPlan& s, const ConvGeom& g, const QIn& x, const int8_t* packed,
              const std::vector<int32_t>& b, const Requant& r, uint8_t* table, int32_t* wide) {
    if (s.from_quads) fill_quad_planes(x.data, g, s.quads);
    if (s.wide) widen_all(packed, g.oc * s.kp, wide);
    if (table) fill_chans(b.data(), r.multiplier, r.shift, g.oc, r, table);
}

// Enough position blocks: each task packs its own (kRunBlocks of them where s.run says so).
void task_blocks(const ConvPlan& s, const ConvGeom& g, const QIn& x, const int8_t* packed,
                 const std::vector<int32_t>& b, const Requant& r, uint8_t* out,
                 uint8_t* table, int32_t* wide) {
    const bool tiles = s.amx && !s.amx_emulate;
    const int64_t quads = s.kp / kGroup;
#pragma omp parallel if (g.groups * s.blocks > 1)
    {
        prologue(s, g, x, packed, b, r, table, wide);
        // once a thread, not a block: its guard check shows on 1x1 layers of many blocks
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
}

// Few blocks (batch 1, small maps): pack them all once, split along k, then split the
// output channels into chunks over the shared packed blocks (the AMX tiles read the last
// block's quads past kp too).
void shared_blocks(const ConvPlan& s, const ConvGeom& g, const QIn& x, const int8_t* packed,
                   const std::vector<int32_t>& b, const Requant& r, uint8_t* out,
                   uint8_t* table, int32_t* wide) {
    const bool tiles = s.amx && !s.amx_emulate;
    const int64_t blocks = g.groups * s.blocks, quads = s.kp / kGroup;
    const int64_t slack = s.amx ? (s.amx_chunks * kAmxK - s.kp) * kPos : 0;
    uint8_t* all = thread_space(Space::blocks, blocks * s.kp * kPos + slack);
    const int64_t parts = s.chunks, per = (quads + parts - 1) / parts;
#pragma omp parallel
    {
        prologue(s, g, x, packed, b, r, table, wide);
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

// Batch 1, small maps (ConvPlan::own_blocks: groups 1, not AMX): every thread packs all the
// blocks into its own scratch and runs its share of the weight blocks over them.
void own_blocks(const ConvPlan& s, const ConvGeom& g, const QIn& x, const int8_t* packed,
                const std::vector<int32_t>& b, const Requant& r, uint8_t* out, uint8_t* table,
                int32_t* wide) {
    const int64_t oblocks = (s.ocg + kOcBlock - 1) / kOcBlock, block = s.kp * kPos;
#pragma omp parallel
    {
        prologue(s, g, x, packed, b, r, table, wide);
        uint8_t* mine = thread_space(Space::blocks, s.blocks * block);
        for (int64_t blk = 0; blk < s.blocks; ++blk)
            pack_part(s, g, 0, blk, 0, s.kp / kGroup, mine + blk * block);
        const int64_t th = omp_get_thread_num(), nt = omp_get_num_threads();
        AmxGemmState st;  // run_tiles' argument; no AMX here
        for (int64_t blk = 0; blk < s.blocks; ++blk)
            run_tiles(s, g, packed, b, r, mine + blk * block, 0, blk, oblocks * th / nt,
                      oblocks * (th + 1) / nt, out, st);
    }
}

void check_algo(const ConvGeom& g, ConvAlgo algo, const int8_t* wamx, const int8_t* wgemm) {
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
}

}  // namespace

void conv2d(const QIn& x, const ConvGeom& g, const int8_t* packed, const int32_t* row_sums,
            const int32_t* bias, const Requant& r, uint8_t* out, ConvAlgo algo,
            const int8_t* wamx, const NarrowWeights* narrow, const int8_t* wgemm) {
    check_algo(g, algo, wamx, wgemm);
    const std::vector<int32_t> b = corrected_bias(bias, row_sums, g.oc, zero_of(x));
    const bool automatic = algo == ConvAlgo::automatic;
    const bool gemm_amx = algo == ConvAlgo::packed_amx ||
                          (automatic && amx_automatic() && wgemm && amx_gemm_wins(g));
    const NarrowWeights* nw = narrow && narrow_tile() && !gemm_amx ? narrow : nullptr;
    if (nw) packed = nw->packed;
    if (algo == ConvAlgo::amx || (automatic && amx_automatic() && wamx && amx_wins(g))) {
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
    uint8_t* table = gemm_amx ? nullptr : chans_space(s.tile, s.blocks, g.oc);
    s.chans = table;
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
    } else if (s.own_blocks) {
        own_blocks(s, g, x, packed, b, r, out, table, wide.get());
    } else if (s.chunks == 1) {
        task_blocks(s, g, x, packed, b, r, out, table, wide.get());
    } else {
        shared_blocks(s, g, x, packed, b, r, out, table, wide.get());
    }
}

}  // namespace int8
}  // namespace tianyuan
