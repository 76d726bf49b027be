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

// The AVX2 tile's weights widened once a call, against per tile: where there are at least
// kWideMinBlocks blocks and kWideMinDepth deep (with few blocks the widened copy, twice the
// bytes, is read back from L2 / L3 while a tile's own stays in L1; shallow stems and 1x1
// layers lose too), or where the widened weights are small enough to stay in L1
// (kWideMaxSmall). bench/RESULTS.md, int8 kernels: AVX2.
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
// (the input read twice) and writing whole rows wins where the layer widens the channels;
// layers that narrow them (the input the larger), maps of 56x56 and beyond, and grouped
// layers (every group's blocks packed by every thread) lose (bench/RESULTS.md, int8 kernels:
// each thread packs every block at b1). Taken for one image, groups 1, of one position block
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
// through L3 both ways (bench/RESULTS.md, int8 kernels: the planes one image at a time).
void packed_images(const ConvPlan& s, const ConvGeom& g, const QIn& x, const int8_t* packed,
                   const std::vector<int32_t>& b, const Requant& r, uint8_t* out);

}  // namespace int8
}  // namespace tianyuan
