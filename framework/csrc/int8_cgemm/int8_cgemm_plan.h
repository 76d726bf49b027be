// The packed int8 convolution's plan and block work (int8_cgemm_plan.cpp), shared by its
// driver (conv2d in int8_cgemm.cpp): the plan of a call, a block's activations packed, the
// weight blocks run over it, and the per-image path. Generic translation units only.
#pragma once

#include <cstdint>
#include <vector>

#include "int8_amx/int8_amx.h"
#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

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
    // Batch 1, small maps (own_blocks_wins): every thread packs all the position blocks itself
    // and runs its share of the output channels over them, whole output rows, no barrier.
    bool own_blocks = false;
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

// A thread's ring of images (packed_images): image n's quad planes or padded input at
// base + n % slots * image; bytes up to `end` readable.
struct Ring {
    uint8_t* base = nullptr;
    int64_t slots = 0, image = 0;
    const uint8_t* end = nullptr;
};

// Batch 1 at 14x14 and 7x7 had split the positions between the threads (blocks of 64 and 34
// at 14x14) or the output channels over blocks packed once by all threads: the threads then
// wrote the same cache line of every output row (a row of 196 bytes split at 98), or read the
// blocks from the other core's cache behind a barrier. Each thread packing every block itself
// (the input read twice) and writing whole rows, MobileNetV2's 1x1 layers at batch 1 took
// 0.50-0.52x their time at 14x14 where they widen (64 -> 384, 96 -> 576), 0.75-0.91x at 7x7,
// 0.86x at 28x28 (32 -> 192); its forward 0.93x (AVX2 too), ShuffleNetV2's 0.97x, ResNet-18
// level (Zen 5, 2 threads, alternating in one process). Layers that narrow at 14x14 and 28x28
// (384 -> 64, 192 -> 32: the input the larger) took 1.08-1.15x, those at 56x56 and beyond
// 1.03-2.3x, and grouped ones, every group's blocks packed by every thread, ShuffleNetV1's
// forward 1.03x (3 groups) and 1.14x (8): taken for one image, groups 1, of one position block
// or of up to 16 that widen the channels, with at least two weight blocks a thread, on up to
// kOwnBlocksMaxThreads threads: each thread's copy of the packing grows with their number
// (a one-block 3x3 layer of 256 channels: 147 KB a thread against 1/16 of its products on
// 16), and no host with more than 2 was measured.
constexpr int64_t kOwnBlocksMaxThreads = 4;
bool own_blocks_wins(const ConvGeom& g, int64_t oblocks, int64_t threads);

// amx: the blocks' products run on AMX tiles (amx_gemm_block), channels kAmxOc a block.
ConvPlan plan(const QIn& x, const ConvGeom& g, bool narrow, bool amx);

// Weight blocks [ob0, ob1) of group gi over the packed activation block blk. A block inside
// one image is written in place; one that spans images goes through a staging tile.
void run_tiles(const ConvPlan& s, const ConvGeom& g, const int8_t* packed,
               const std::vector<int32_t>& b, const Requant& r, const uint8_t* buf, int64_t gi,
               int64_t blk, int64_t ob0, int64_t ob1, uint8_t* out, AmxGemmState& st);

// All packed weights (bytes, a multiple of 4) widened for the AVX2 tile, as an orphaned
// `omp for`: inside a parallel region, its threads share the work.
void widen_all(const int8_t* packed, int64_t bytes, int32_t* wide);

// Activation block blk of group gi, k-quads [q0, q1) only, from the batch's quad planes or
// padded input, or from a thread's ring of images (ring.base not null).
void pack_part(const ConvPlan& s, const ConvGeom& g, int64_t gi, int64_t blk, int64_t q0,
               int64_t q1, uint8_t* buf, const Ring& ring = Ring{});

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
                   const std::vector<int32_t>& b, const Requant& r, uint8_t* out);

}  // namespace int8
}  // namespace tianyuan
