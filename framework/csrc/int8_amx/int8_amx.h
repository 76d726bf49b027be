// int8 convolution on AMX tiles (TDPBUSD: 16 x 16 s32 += 16 x 64 u8 . 64 x 16 s8 per
// instruction, 8x a VNNI instruction's work). Numpy twin: reference.qconv2d.
//
// The tile's u8 operand holds 64 consecutive k of each of 16 positions in a row, so the
// input is rewritten once per call as NHWC planes per stride phase (as the direct algorithm
// of int8_cgemm.h does with channel quads): per image, phase (a, b) of the stride and
// position (y, x) of a hph x wph plane, c bytes of xpad[sh*y + a][sw*x + b] (sign bit
// flipped for s8, zero point outside); images lie image_positions * c bytes apart, the last
// kAmxPos positions of each being slack. Virtual positions v = oy*wph + ox run in blocks of
// kAmxPos, tap t reads the block at v + toff[t] positions, and the wph - ow columns past each
// row end are computed and dropped. Only the phases some tap reads are written (a 1x1
// stride-2 layer reads one of four). The planes and the packed weights start on 64-byte
// boundaries (every tile row then is one cache line; across two, tile loads are far slower).
// Weights (packed once, amx_pack_weights), per block of kAmxOc output channels, tap and
// chunk of kAmxK input channels, two s8 tiles of 16 k-quad rows x 16 channels x 4 bytes:
//   w[((ob*taps + t)*chunks + cc)*2048 + h*1024 + q*64 + o*4 + i]
//     = W[ob*32 + h*16 + o][cc*64 + q*4 + i][t]
// A work item (image, block of positions, block of channels) runs 4 accumulator tiles (2 x 2
// of 16 positions x 16 channels) over every (tap, chunk); the store requantizes each
// accumulator row (a position, 16 channels in lanes) with the channels' parameters as
// vectors, then transposes the bytes into 16-position runs of channel rows stored straight
// into the NCHW output. On channels-last activations (conv2d_amx's xs, out_nhwc) the planes'
// rows are copies of the input's rows (no transpose) and each accumulator row, a position's
// 32 channels, is requantized and stored as it lies, faster than the NCHW form for the int8
// ResNets (bench/RESULTS.md, int8 kernels: channels-last on AMX).
//
// Where the OS grants no AMX the same kernel runs on emulated tiles (plain C++ with the
// instructions' semantics), which is what the tests check bit for bit against the reference
// there; where it grants AMX the tests run the real tiles (first on 2026-12-02, a Sapphire
// Rapids-class VM), and the automatic choice takes them only after they have matched the
// emulated ones once per process. bench/amx_bochs/run.sh runs the real tiles under Bochs
// 3.0's Sapphire Rapids model on machines without AMX.
#pragma once

#include <cstdint>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_gemm.h"

namespace tianyuan {
namespace int8 {

struct ConvGeom;

constexpr int64_t kAmxPos = 32;  // positions per work item (2 tiles of 16 rows)
constexpr int64_t kAmxOc = 32;   // output channels per work item (2 tiles of 16 columns)
constexpr int64_t kAmxK = 64;    // input channels per k step (one tile row of u8)

// groups 1, C a multiple of kAmxK, OC of kAmxOc.
bool amx_takes(const ConvGeom& g);
// The automatic choice: kernels of more than one tap. 1x1 layers lose to the VNNI algorithms
// here (one k step of 64 per tile load, and the NHWC copy and the requantizing store a larger
// share of less work): bench/RESULTS.md, int8 kernels: AMX.
bool amx_wins(const ConvGeom& g);
int64_t amx_packed_size(int64_t oc, int64_t c, int64_t taps);
// W (OC, C, taps) s8 row-major -> the layout above.
void amx_pack_weights(const int8_t* w, int64_t oc, int64_t c, int64_t taps, int8_t* dst);

// The convolution (bias already corrected for the input zero point); emulate: emulated
// tiles instead of the real ones (needs AVX-512 for the store). xs: x's byte strides (N, C,
// H, W) with its channels side by side (xs[1] == 1, channels-last: each plane row is copied,
// not transposed; flip must be 0), or null for C-contiguous x. out_nhwc: out is (N, OH, OW,
// OC), each position's channels one run (the accumulator rows requantized as they lie, no
// transpose), else C-contiguous (N, OC, OH, OW).
void conv2d_amx(const uint8_t* x, uint8_t flip, uint8_t z, const ConvGeom& g,
                const int8_t* wamx, const int32_t* bias, const Requant& r, uint8_t* out,
                bool emulate, const int64_t* xs = nullptr, bool out_nhwc = false);
// The rows form for layers of few input channels (int8_rows_amx.cpp: the stem): C-contiguous
// x u8 (flip 0) in, channels-last (N, OH, OW, OC) out, tile rows read from R padded input rows
// interleaved per column (R = min(kh, 64 / (kw C))). Takes groups 1, OC a multiple of 32, more
// than one tap, no dilation, kw C <= 64 and R C <= 16; the automatic choice (amx_rows_wins)
// where C <= 4. Weights (amx_rows_weights from the conv-packed layout of int8_cgemm.h, groups
// 1): per block of 32 output
// channels and chunk cc of ceil(kh / R), the two s8 tiles of amx_pack_weights, k-byte b being
// kernel column b / (R C), row cc R + b % (R C) / C, channel b % C (zero past the kernel).
bool amx_rows_takes(const ConvGeom& g);
bool amx_rows_wins(const ConvGeom& g);
int64_t amx_rows_size(int64_t oc, int64_t c, int64_t kh, int64_t kw);
void amx_rows_weights(const int8_t* packed, int64_t oc, int64_t c, int64_t kh, int64_t kw,
                      int8_t* dst);
void conv2d_amx_rows(const uint8_t* x, uint8_t z, const ConvGeom& g, const int8_t* wrows,
                     const int32_t* bias, const Requant& r, uint8_t* out, bool emulate);
// Whether the real tiles give the emulated tiles' bits, both algorithms' and the rows form's
// (checked once per process; false where the OS grants no AMX; int8_amx_check.cpp).
bool amx_verified();
// Whether the automatic algorithm choice may take the AMX algorithms: a planning decision on
// the ISA, read once per call from the conv family's table (int8_conv_kernels.h: the amx
// level), with verified tiles.
bool amx_automatic();

// An item's requantizing store: acc (kAmxPos x kAmxOc s32, row stride kAmxOc) requantized
// (channel o's parameters at q.*[o]) to base + o * ld as win[p / 16] says for position p;
// with offs (channels-last), position p's kAmxOc bytes to base + offs[p] (none where < 0).
struct AmxWindow;
struct AmxPending {
    const int32_t* acc;
    RowParams q;
    const Requant* r;
    uint8_t* base;
    int64_t ld;
    const AmxWindow* win;
    const int64_t* offs = nullptr;
};
constexpr int kAmxPieces = 16;  // the store's pieces (int8_requant_amx.h)

// The AMX unit (int8_tiles_amx.cpp). item: the accumulator tiles 0-3 = sum over its steps s
// of the two position halves' u8 rows at a0 + soff[s] and a1 + soff[s] (16-row tiles, row
// stride lda) times step s's weight tiles at w + 2048 s, left in the tiles, with the previous
// item's store (prev, unless null) spread over the steps (the planes kernel: a step a (tap,
// chunk), a1 = a0 + 16 lda; the rows form: a step a chunk, its halves anywhere); store: acc
// (as AmxPending's) = those tiles. tiles_begin / tiles_end configure and release the tiles of
// the calling thread (real tiles only; the emulated ones are per thread too).
void amx_tiles_begin();
void amx_tiles_end();
void amx_item_tiles(const uint8_t* a0, const uint8_t* a1, int64_t lda, const int64_t* soff,
                    int64_t steps, const int8_t* w, const AmxPending* prev);
void amx_store_tiles(int32_t* acc);
void amx_item_emulated(const uint8_t* a0, const uint8_t* a1, int64_t lda, const int64_t* soff,
                       int64_t steps, const int8_t* w, const AmxPending* prev);
void amx_store_emulated(int32_t* acc);
// Register-only TDPBUSD throughput: `steps` x 4 independent instructions on the calling
// thread (tiles configured inside); returns a checksum so that the loop is kept. amx_peak()
// runs it on every OpenMP thread and returns int8 operations per second (2 per multiply-add),
// the peak the benchmarks quote; std::runtime_error where the OS grants no AMX.
int64_t amx_peak_steps(int64_t steps);
double amx_peak(int64_t steps);
// dst[x * c + ch] = src[ch * n + x] for ch < c (a multiple of 16), x < n.
void amx_transpose(const uint8_t* src, int64_t c, int64_t n, uint8_t* dst);
// One pass from the source rows: for ch < 16 and x < len (<= 64), D(x)[ch] = src[ch * lds +
// x] ^ flip where bit x of `valid` is set, else z; nothing else is read. phase 0: D(x) = dst
// + x * ldd; else (x even) the even columns to dst + x / 2 * ldd and the odd ones to dst +
// phase + x / 2 * ldd (stride 2's two column phases in one pass).
void amx_transpose_rows(const uint8_t* src, int64_t lds, uint64_t valid, uint8_t z,
                        uint8_t flip, int64_t len, uint8_t* dst, int64_t ldd, int64_t phase);
// Where an item's window of 16 positions (p / 16) goes: position p's byte of channel o at
// base + o * ld + off[s] + p % 16 for the segment s whose mask has bit p % 16; positions in
// no mask are dropped. The segments are the window's runs within an output row (a store
// each, masked: the bytes outside a mask are neither read nor written).
struct AmxWindow {
    int segs;
    int64_t off[16];
    uint16_t mask[16];
};
// Virtual positions [v, v + 16) of an AMX plan (rows of wph positions, the first ow of each
// real, nv in all) -> their runs in NCHW rows of ow bytes, off relative to the plane. Filled
// in place: returned, the struct's copy had cost a store-forwarding stall per position block.
void amx_window(int64_t v, int64_t wph, int64_t ow, int64_t nv, AmxWindow& w);
// The channels-last store's offsets of the kAmxPos virtual positions from v0 (the same plan):
// (oy * ow + ox) * oc for the real ones, -1 for the dropped (past a row's ow, or past nv).
void amx_offsets(int64_t v0, int64_t wph, int64_t ow, int64_t nv, int64_t oc, int64_t* offs);
// The packed algorithm's blocks on AMX tiles (ConvAlgo::packed_amx) for layers the planes
// above cannot take (the stem: C = 3, K = 147) or do not win (1x1 layers): TDPBSUD takes the weights as the signed
// operand, 16 channels x 64 k a tile, and the packed block (int8_cgemm.h: k-quad q's kPos
// positions at buf + q * kPos * 4) as the unsigned one, 16 k-quads x 16 positions, so the
// sums come out as channel rows of positions, requantized with per-row constants and stored
// straight into NCHW rows, with no transpose either way. K runs in chunks of kAmxK, the
// block's quads past kp read (allocated, their weights zero). Groups 1; OC rounded up to a
// multiple of 32 with zero weights, whose rows are computed and not stored.
inline bool amx_gemm_takes(int64_t groups) { return groups == 1; }
// Whether the automatic choice may take it for a layer (the weights are packed for it once
// where it may): kernels of more than one tap that amx_takes refuses (C not a multiple of 64:
// the stems) with OC a multiple of 32, and 1x1 kernels of 32 or more channels in and out.
inline bool amx_gemm_may_win(int64_t oc, int64_t c, int64_t taps, int64_t groups) {
    if (!amx_gemm_takes(groups)) return false;
    return taps > 1 ? oc % kAmxOc == 0 && c % kAmxK != 0 : c >= 32 && oc >= 32;
}
// The automatic choice for a call (int8_amx.cpp has the figures).
bool amx_gemm_wins(const ConvGeom& g);
inline int64_t amx_gemm_chunks(int64_t kp) { return (kp + kAmxK - 1) / kAmxK; }
inline int64_t amx_gemm_size(int64_t oc, int64_t kp) {
    return (oc + kAmxOc - 1) / kAmxOc * kAmxOc * amx_gemm_chunks(kp) * kAmxK;
}
// The conv layout's weights (int8_cgemm.h, packed, oc rows of kp) -> wa (amx_gemm_size
// bytes; packed once, where the convolution's weights are fixed), per block of kAmxOc rows,
// chunk cc and half h, a tile of 16 rows x 64 k (zeros past kp and past oc):
//   wa[((ob * chunks + cc) * 2 + h) * 1024 + o * 64 + kk] = W[ob * 32 + h * 16 + o][cc * 64 + kk]
void amx_gemm_weights(const int8_t* packed, int64_t oc, int64_t kp, int8_t* wa);
// A thread's packed-block products between calls: two s32 stages of a chunk of kAmxOc channel
// rows x kPos positions, and the chunk whose stage waits for its requantizing store (acc
// null: none), which the next chunk's tile steps run in pieces, in the same block or the
// thread's next one; amx_gemm_flush stores it at the end.
struct AmxGemmState {
    alignas(64) int32_t stage[2][kAmxOc * kPos];
    int slot = 0;
    const int32_t* acc = nullptr;
    int64_t j = 0, end = 0, npos = 0, ld = 0;  // channels [j, min(j + kAmxOc, end))
    RowParams q{};
    const Requant* r = nullptr;
    uint8_t* out = nullptr;
    StoreSeg segs[kPos];
    int nsegs = 0;
};
// Channels [j0, j1) (j0 a multiple of kAmxOc) over a packed block of npos (<= kPos) positions,
// the layer's parameters at q.*[ch] for channel ch. Per chunk of kAmxOc channels the tiles run
// the block's position halves (32 positions a pass, 4 accumulators) into a stage of st, and
// st's pending chunk is requantized, a row of 64 positions to a store, in pieces between the
// tile steps. Needs tiles configured (amx_tiles_begin) unless emulated; r and out must
// outlive st's pending store.
void amx_gemm_block_tiles(const uint8_t* buf, int64_t chunks, const int8_t* wa, int64_t j0,
                          int64_t j1, int64_t npos, const RowParams& q, const Requant& r,
                          uint8_t* out, int64_t ld, const StoreSeg* segs, int nsegs,
                          AmxGemmState& st);
void amx_gemm_block_emulated(const uint8_t* buf, int64_t chunks, const int8_t* wa, int64_t j0,
                             int64_t j1, int64_t npos, const RowParams& q, const Requant& r,
                             uint8_t* out, int64_t ld, const StoreSeg* segs, int nsegs,
                             AmxGemmState& st);
void amx_gemm_flush(AmxGemmState& st);

// The store alone (what the item loop spreads over its steps).
void amx_requant(const AmxPending& pending);

}  // namespace int8
}  // namespace tianyuan
