// int8 convolution on channels-last activations: x u8 with each pixel's channels side by side
// (logical shape (N, C, H, W), any pixel strides) in, (N, OH, OW, OC) out, groups 1. The
// output channels run in the vector lanes and each output position's activations are
// broadcast, 4 input channels (one k-quad) at a time, from where they lie in x: no copy of the
// input (no planes, no padded rows, no lanes for positions the output drops), and each
// position's channels are stored as one run of bytes. Steps in the padding read a row of
// zero-point bytes instead (an indirection like XNNPACK's, made only for the tiles on the
// border). The int8 ResNets carry this layout on the vnni level, where it beats their NCHW
// algorithms (nn.quantized.Conv2d's channels_last; bench/RESULTS.md, int8 kernels: the
// channels-last engine).
//
// Weights (nhwc_pack_weights): blocks of kNhwcOc output channels; block b holds, per tap
// t = ky * kw + kx and channel quad q (nhwc_quads(C) of them, input channels past C zero), its
// nv(b) * 16 channels' 4 bytes (channel c of the block at 4 c), nv(b) = ceil(min(kNhwcOc,
// OC - b * kNhwcOc) / 16), output channels past OC zero. Where C % 4 != 0 a second form
// follows, by kernel row: row r's nhwc_row_quads(C, kw) quads hold its taps' channels side by
// side, (kx, c) at byte kx * C + c, zero past kw * C (a 7x7 RGB kernel: 6 quads a row, not 7);
// with C % 4 == 0 the first form is that already.
#pragma once

#include <cstdint>

#include "int8_gemm/int8_gemm.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

constexpr int64_t kNhwcOc = 64;  // output channels per weight block: 4 zmm of 16 lanes
constexpr int kNhwcPos = 6;      // output positions per tile: 6 x 4 accumulators

inline int64_t nhwc_quads(int64_t c) { return (c + 3) / 4; }
inline int64_t nhwc_row_quads(int64_t c, int64_t kw) { return (kw * c + 3) / 4; }
int64_t nhwc_packed_size(int64_t oc, int64_t c, int64_t kh, int64_t kw);
// Where the blocks of one form start in the packed weights: by kernel row (rows; with C % 4 ==
// 0 the same bytes as by tap) or by tap.
int64_t nhwc_form_offset(int64_t oc, int64_t c, int64_t kh, int64_t kw, bool rows);
// w (OC, C, kh, kw) s8 row-major -> the blocks above.
void nhwc_pack_weights(const int8_t* w, int64_t oc, int64_t c, int64_t kh, int64_t kw,
                       int8_t* out);

// One tile's work: npos (<= kNhwcPos) consecutive output positions x one weight block, over
// `steps` steps of the k-loop (kernel rows or taps, conv2d_nhwc's choice) of `quads` quads.
// Position m's bytes for step s start at base[m] + soff[s] or, with table set, at
// table[s * kNhwcPos + m]; quad q of a step is the 4 bytes 4 q further. The sums, from the
// block's corrected bias (bias - z * row sums, padded to the block's whole vectors), go to
// sums + 64 m, 16 nv s32 a position: the tiles leave the requantization to nhwc_requant_*,
// a few tiles' positions at a time (its latency shows in the tile: bench/RESULTS.md).
struct NhwcTile {
    const uint8_t* const* base;
    const int64_t* soff;
    const uint8_t* const* table;
    int64_t steps, quads;
    const int8_t* w;  // the block, in the steps' form
    int nv, npos;
    const int32_t* bias;
    int32_t* sums;
};
using NhwcTileFn = void (*)(const NhwcTile&);
void nhwc_tile_generic(const NhwcTile& t);
void nhwc_tile_vnni(const NhwcTile& t);

// A block's requantization constants, worked out once where the requantization is fixed
// (nhwc_block_q, by Int8Conv): per channel multiplier and shift (padded to the whole block:
// multiplier 0, shift 33) and, where every shift of the block is 33 or more (`fold`, the usual
// case), the vectors of requant_lanes_y's fold form.
struct NhwcBlockQ {
    int32_t mult[kNhwcOc], shift[kNhwcOc], mult_odd[kNhwcOc], half_hi[kNhwcOc], shift_hi[kNhwcOc];
    bool fold;
};
inline int64_t nhwc_blocks(int64_t oc) { return (oc + kNhwcOc - 1) / kNhwcOc; }
// r's multipliers and shifts (step 1) of oc channels -> q[nhwc_blocks(oc)].
void nhwc_block_q(const Requant& r, int64_t oc, NhwcBlockQ* q);

// One block's requantization of npos positions' sums (npos, 64) s32 (the bias in them) ->
// out + p * ldo, nbytes (the block's real channels) each.
struct NhwcRequant {
    const NhwcBlockQ* q;
    const Requant* r;  // zero point and bounds
    int nv;
    int64_t nbytes;
};
using NhwcRequantFn = void (*)(const int32_t* sums, int64_t npos, const NhwcRequant& q,
                               uint8_t* out, int64_t ldo);
void nhwc_requant_generic(const int32_t* sums, int64_t npos, const NhwcRequant& q,
                          uint8_t* out, int64_t ldo);
void nhwc_requant_vnni(const int32_t* sums, int64_t npos, const NhwcRequant& q, uint8_t* out,
                       int64_t ldo);

// Whether the current ISA has a fast tile for this engine (VNNI and AMX hosts); elsewhere it
// runs the generic tile, exact but slow.
bool nhwc_fast();

// x u8 of logical shape (N, C, H, W), element (n, c, y, x) at x + n stride[0] + c stride[1] +
// y stride[2] + x stride[3], zero point z (g: the geometry, groups 1); wp the packed blocks,
// sums the weights' row sums (OC,), r the requantization (r.bias the raw bias, step 1) and q
// its nhwc_block_q -> out (N, OH, OW, OC). x has its channels side by side (stride[1] == 1:
// channels-last, any other strides). Where a step's quads hold more bytes than it reads (C or
// kw * C not a multiple of 4; zero weights), no read passes x's last byte
// (int8_conv_nhwc_driver.cpp).
void conv2d_nhwc(const uint8_t* x, const int64_t* stride, int32_t z, const ConvGeom& g,
                 const int8_t* wp, const int32_t* sums, const Requant& r, const NhwcBlockQ* q,
                 uint8_t* out);

}  // namespace int8
}  // namespace tianyuan
