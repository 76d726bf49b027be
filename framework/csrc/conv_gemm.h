// Direct convolution as a GEMM whose right-hand panels are packed straight from the image:
// no im2col matrix is ever written. float32, groups == 1, NCHW.
//
//   out[n][co][p] = act(scale[co] * sum_k w[co][k] * X_n[k][p] + shift[co])
//   k = (c * kh + i) * kw + j,  p = oy * out_w + ox,
//   X_n[k][p] = x[n][c][oy * sh - pt + i * dh][ox * sw - pl + j * dw]  (0 outside the image)
//
// scale may be null (1), shift may be null (0); act: 0 none, 1 ReLU, 2 ReLU6. With scale and
// shift a frozen batch norm folds into the store, so conv + BN + activation is one pass.
// Blocking: a panel of kNr output positions by kKc reduction rows is packed (it stays in L1)
// and every kMr-row block of output channels runs over it; w is repacked once per call as
// (Co/kMr, K, kMr) so a block's weights are one stream (12 rows of w read in place, K * 4
// bytes apart, fell into two L1 sets at K = 4608). Pointwise convolutions read x in place.
// Numpy twin: framework/ops/conv_ref.py, conv2d_ref followed by conv_epilogue_ref.
#pragma once

#include <cstdint>

#include "im2col.h"

namespace tianyuan {

constexpr int64_t kConvGemmNr = 32;   // positions per panel (two AVX-512 vectors)
constexpr int64_t kConvGemmMr = 12;   // output channels per register block
constexpr int64_t kConvGemmKc = 128;  // reduction rows per packed panel

struct ConvEpilogue {
    const float* scale;  // (Co,) or null
    const float* shift;  // (Co,) or null
    int act;             // 0 none, 1 ReLU, 2 ReLU6
};

// x (N, C, H, W), w (Co, C, kh, kw), out (N, Co, out_h, out_w); all contiguous.
void conv_gemm_forward(const float* x, const float* w, int64_t co, const Conv2dGeometry& g,
                       const ConvEpilogue& epi, float* out);

// The register-block kernel of one ISA: rows [0, mr) of out (row stride ldc) at lanes
// [0, nvalid) += packed weights (kc x kMr, row k at a + k * kMr) times kc rows of kNr
// positions at b (row stride ldb: kNr for a packed panel, the plane size when reading a
// pointwise input in place); `first` starts from 0, `last` applies the epilogue of these rows.
using ConvGemmKernel = void (*)(const float* a, const float* b, int64_t ldb, int64_t kc,
                                float* out, int64_t ldc, int64_t mr, int64_t nvalid, bool first,
                                bool last, const float* scale, const float* shift, int act);

// Panel lanes [lane, lane + len) lie in output row oy, from column ox.
struct ConvGemmSegment {
    int64_t oy, ox, lane, len;
};

// Packs rows [k0, k0 + kc) of X_n (xn: one image) for the panel whose lanes `seg` describe
// (nvalid lanes in all) into panel[kk * kNr + lane]; lanes >= nvalid are zero.
using ConvGemmPack = void (*)(const float* xn, const Conv2dGeometry& g,
                              const ConvGemmSegment* seg, int64_t nseg, int64_t nvalid,
                              int64_t k0, int64_t kc, float* panel);

ConvGemmKernel conv_gemm_kernel_avx512();
ConvGemmPack conv_gemm_pack_avx512();

}  // namespace tianyuan
