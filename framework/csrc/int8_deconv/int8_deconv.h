// int8 transposed convolution (ConvTranspose2d) on NCHW u8/s8 tensors. Numpy twin:
// framework/quantization/reference.py (conv_transpose2d, qconv_transpose2d); every ISA path
// is bit-exact to it.
//
// Algorithm (the GEMM + col2im form, as the float ConvTranspose2d): per group g,
//   cols (N*H*W, kh*kw*OC/groups) = (x_g - zp)^T (N*H*W, C/groups) @ W_g (C/groups, taps)
// on the int8 GEMM blocks of int8_gemm.h (no multiply is spent on inserted zeros: stride 2
// would spend 3 of 4 in the zero-insertion form), then every output row gathers the columns
// of the input pixels that reach it (col2im) into int32 and is requantized per channel.
// Weight rows are ordered (i, j, oc) so that one tap of one input pixel is a contiguous run of
// OC/groups accumulators, added to a contiguous run of the output pixel's (OW, OC) row.
//
// Packed weights (ISA independent): group g's W_g^T (taps, C/groups) in pack_weights' layout
// (int8_gemm.h) at g * deconv_group_bytes, row sums (groups, taps) over C/groups.
#pragma once

#include <cstdint>

#include "int8_gemm/int8_gemm.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

struct DeconvGeom {
    int64_t n, c, h, w;          // input (N, C, H, W)
    int64_t oc, kh, kw;          // weight (C, OC/groups, kh, kw); oc: all output channels
    int64_t sh, sw, dh, dw;      // stride, dilation
    int64_t pt, pb, pl, pr;      // padding: rows/columns cropped from the full output
    int64_t groups, oh, ow;      // output (N, OC, oh, ow), output_padding included
};

// Rows of one group's packed weights: kh * kw * OC/groups taps.
static inline int64_t deconv_taps(int64_t ocg, int64_t kh, int64_t kw) { return kh * kw * ocg; }
static inline int64_t deconv_group_bytes(int64_t cg, int64_t ocg, int64_t kh, int64_t kw) {
    return packed_size(deconv_taps(ocg, kh, kw), cg);
}

// w (C, OC/groups, kh, kw) s8 -> packed (groups * deconv_group_bytes) and row_sums
// (groups * taps).
void pack_deconv_weights(const int8_t* w, int64_t c, int64_t ocg, int64_t kh, int64_t kw,
                         int64_t groups, int8_t* packed, int32_t* row_sums);

// x (N, C, H, W) -> out (N, OC, oh, ow): r carries per-channel bias, multiplier and shift
// (step 1) and the output zero point and bounds. The geometry is the binding's, checked.
void conv_transpose2d(const QIn& x, const DeconvGeom& g, const int8_t* packed,
                      const int32_t* row_sums, const Requant& r, uint8_t* out);

// The family's kernels, one table, chosen once per ISA (runtime/dispatch.h):
// gemm_block and requant_row are int8_gemm.h's; add_taps is acc[i] += c[i] - fix[i] for
// i < n, modulo 2^32 (exact whenever the reference's int32 sum fits).
struct DeconvKernels {
    void (*gemm_block)(const uint8_t* a, int64_t lda, int64_t rows, const int8_t* b, int64_t kp,
                       int64_t npanels, int32_t* c, int64_t ldc);
    void (*requant_row)(const int32_t* acc, int64_t n, const Requant& r, uint8_t* out);
    void (*add_taps)(int32_t* acc, const int32_t* c, const int32_t* fix, int64_t n);
};
const DeconvKernels& deconv_kernels();

void add_taps_generic(int32_t* acc, const int32_t* c, const int32_t* fix, int64_t n);
void add_taps_avx2(int32_t* acc, const int32_t* c, const int32_t* fix, int64_t n);
void add_taps_avx512(int32_t* acc, const int32_t* c, const int32_t* fix, int64_t n);

}  // namespace int8
}  // namespace tianyuan
