// int8 convolution as a "channels x positions" GEMM whose store is the requantization:
// out (OC, P) = W (OC, K) x cols (K, P) per image and group, written as u8/s8 straight
// into NCHW, with no s32 intermediate and no transpose. Numpy twin: reference.qconv2d.
//
// Conv weight layout (ISA independent; packed once at quantize() time):
//   per group, OCg rows of K s8 (K = C/groups*kh*kw in (c, i, j) order), Kp = K rounded up
//   to 4; rows in blocks of kOcBlock (the last block may be shorter, rb rows):
//     packed[g*OCg*Kp + b*kOcBlock*Kp + (k/4)*rb*4 + r*4 + k%4] = W[b*kOcBlock + r][k]
//   so one k-quad of the rb rows of a block is rb consecutive 32-bit words (broadcasts).
// Activation block layout (built per call, per block of up to kPos output positions):
//   buf[(k/4)*kPos*4 + p*4 + k%4] = xpad[koff[k] + src(p)]: 4 consecutive k of one position
//   form the u8 operand lane of vpdpbusd; positions past the block end hold junk.
#pragma once

#include <cstdint>

#include "int8_gemm.h"

namespace tianyuan {
namespace int8 {

constexpr int64_t kOcBlock = 6;  // output channels per weight block (register rows)
constexpr int64_t kPos = 64;     // output positions per activation block (4 zmm panels)

// W (OC, K) s8 row-major -> conv layout above (oc*Kp bytes) and row sums (OC,).
void pack_conv_weights(const int8_t* w, int64_t oc, int64_t k, int8_t* packed,
                       int32_t* row_sums);

// A run of consecutive output positions of one block that read one input row:
// buf position dst + t reads xpad[koff + src + t * stride], t < len.
struct Run {
    int64_t dst, src, len;
};

// One activation block: k rows (koff (K,) offsets into xpad), runs with input stride sw.
void pack_block_generic(const uint8_t* xpad, const int64_t* koff, int64_t k, int64_t kp,
                        const Run* runs, int64_t nruns, int64_t sw, uint8_t* buf);
void pack_block_avx512(const uint8_t* xpad, const int64_t* koff, int64_t k, int64_t kp,
                       const Run* runs, int64_t nruns, int64_t sw, uint8_t* buf);

// Per-channel requantization of one weight block; r carries zero point and bounds.
struct RowParams {
    const int32_t* bias;        // corrected: bias - z * row_sums
    const int32_t* multiplier;
    const int32_t* shift;
};

// rows (<= kOcBlock) channels x npos (<= kPos) positions: out[r*ldo + p] = requantized
// sum_k w[r][k] * buf[k][p]. w is the block's packed rows.
void cgemm_tile_generic(const uint8_t* buf, const int8_t* w, int64_t kp, int64_t rows,
                        int64_t npos, const RowParams& q, const Requant& r, uint8_t* out,
                        int64_t ldo);
void cgemm_tile_vnni(const uint8_t* buf, const int8_t* w, int64_t kp, int64_t rows,
                     int64_t npos, const RowParams& q, const Requant& r, uint8_t* out,
                     int64_t ldo);

// Depthwise, one channel plane: xp (Hp, Wp) padded with the zero point (u8, sign bit
// flipped for s8) and readable kPadSlack bytes past its end; q holds the channel's bias
// (already minus z * sum(w)), multiplier and shift; out (oh, ow); scratch >= oh * wp + 64
// bytes. Any stride and dilation (fast paths at strides 1 and 2).
constexpr int64_t kPadSlack = 256;
struct ConvGeom;
void depthwise_plane_avx512(const uint8_t* xp, int64_t wp, const int8_t* w, const ConvGeom& g,
                            const RowParams& q, const Requant& r, uint8_t* out,
                            uint8_t* scratch);

}  // namespace int8
}  // namespace tianyuan
