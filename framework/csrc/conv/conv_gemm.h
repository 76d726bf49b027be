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
// bytes apart, fell into two L1 sets at K = 4608). Panels run over the positions of the
// whole batch, so a 7x7 map does not leave 15 of its second panel's 32 lanes idle.
// Pointwise convolutions read x in place, one image's positions per panel.
// Numpy twin: framework/ops/conv_ref.py, conv2d_ref followed by conv_epilogue_ref.
#pragma once

#include <cstdint>

#include "im2col/im2col.h"

namespace tianyuan {

constexpr int64_t kConvGemmNr = 32;   // positions per panel (two AVX-512 vectors)
constexpr int64_t kConvGemmMr = 12;   // output channels per register block
// reduction rows per packed panel at most (32 KiB; the depth runs in equal chunks). 256, not
// 128: the partial sums are reloaded half as often (bench/RESULTS.md, fp32 kernels).
constexpr int64_t kConvGemmKc = 256;

struct ConvEpilogue {
    const float* scale;  // (Co,) or null
    const float* shift;  // (Co,) or null
    int act;             // 0 none, 1 ReLU, 2 ReLU6
};

// How the work is laid out (conv_gemm.cpp): `slab` packs all of w and runs kKc rows at a
// time over groups of panels; `stream` packs each work item's panels over the whole depth and
// w one channel block at a time (few panels, big weights); `few` is the few-positions plan
// below (AVX-512 only). Every plan gives the same bits; `automatic` picks by shape, the
// others are for tests and benchmarks.
enum class ConvGemmPlan { automatic, slab, stream, few };

// x (N, C, H, W), w (Co, C, kh, kw), out (N, Co, out_h, out_w); all contiguous.
void conv_gemm_forward(const float* x, const float* w, int64_t co, const Conv2dGeometry& g,
                       const ConvEpilogue& epi, float* out,
                       ConvGemmPlan plan = ConvGemmPlan::automatic);

// Where a panel's output goes: run i holds lanes [lo[i], hi[i]), lane l of output row r
// at base[i] + r * ldc + l (a panel packed over the batch spans several images; base may
// point before the run's first element, as its lanes below lo are never touched).
struct ConvGemmOut {
    float* base[kConvGemmNr];
    int64_t lo[kConvGemmNr], hi[kConvGemmNr];
    int64_t count, ldc;
};

// The register-block kernel of one ISA: output rows [row0, row0 + mr) of `out` at its lanes
// [0, nvalid) (nvalid = out.hi[out.count - 1]) += packed weights (kc x kMr, row k at
// a + k * kMr) times kc rows of kNr positions at b (row stride ldb: kNr for a packed panel,
// the plane size when reading a pointwise input in place); `first` starts from 0, `last`
// applies the epilogue of these rows (scale and shift point at row row0's).
using ConvGemmKernel = void (*)(const float* a, const float* b, int64_t ldb, int64_t kc,
                                const ConvGemmOut& out, int64_t row0, int64_t mr, bool first,
                                bool last, const float* scale, const float* shift, int act);

// Panel lanes [lane, lane + len) lie in output row oy of image n, from column ox.
struct ConvGemmSegment {
    int64_t n, oy, ox, lane, len;
};

// Packs rows [k0, k0 + kc) of X for the panel whose lanes `seg` describe (nvalid lanes in
// all; segment s reads image xn + seg[s].n * C * H * W) into panel[kk * kNr + lane]; lanes
// >= nvalid are zero.
using ConvGemmPack = void (*)(const float* xn, const Conv2dGeometry& g,
                              const ConvGemmSegment* seg, int64_t nseg, int64_t nvalid,
                              int64_t k0, int64_t kc, float* panel);

// Channel block cb of w (co x depth, row-major) into dst[k][r] = w[cb * kMr + r][k], rows
// past co zero.
using ConvGemmPackWeights = void (*)(const float* w, int64_t co, int64_t depth, int64_t cb,
                                     float* dst);

ConvGemmKernel conv_gemm_kernel_avx512();
ConvGemmKernel conv_gemm_kernel_avx2();  // sub-blocks of 6 rows x 16 lanes
// Register-only loops of 12 independent FMA chains (`steps` x 12 vfmadd231ps on zmm / ymm),
// returning a checksum so that the loop is kept; fma_peak runs the current ISA's on every
// OpenMP thread and returns float32 operations per second (2 per multiply-add): the peak the
// float benchmarks quote. It throws std::runtime_error below AVX2.
int64_t fma_peak_steps_avx512(int64_t steps);
int64_t fma_peak_steps_avx2(int64_t steps);
double fma_peak(int64_t steps);
ConvGemmPack conv_gemm_pack_avx2();
ConvGemmPackWeights conv_gemm_pack_weights_avx2();
ConvGemmPack conv_gemm_pack_avx512();
ConvGemmPackWeights conv_gemm_pack_weights_avx512();
// The packer of the current ISA, and the row segments (of image 0) of the panel of nvalid
// lanes from position p0 of an output of width ow (returns their count, at most kNr).
ConvGemmPack conv_gemm_pack();
int64_t conv_gemm_segments(int64_t p0, int64_t nvalid, int64_t ow, ConvGemmSegment* seg);

// The few-positions plan (AVX-512; batch 1 on deep layers): vectors run over output channels
// and positions are broadcast, so 49 or 196 positions fill whole register blocks (32-lane
// panels of positions leave 15 of 64 lanes idle at 7x7). The kernel: acc (kFewMr positions x
// kFewNr channels, row stride kFewNr) (+)= sum over kc reduction rows k of
// xt[k * kConvGemmNr + i] * wt[k * kFewNr + j], for i < kFewMr and the first 16 * `vectors`
// channels j; xt points into a packed panel (ConvGemmPack), wt at a chunk of w packed by
// ConvGemmFewPackWeights; `first` starts from 0. Each output is summed in the order of k with
// fused multiply-adds, as in the other plans, so every plan gives the same bits.
constexpr int64_t kFewMr = 7;      // positions per register block (7x7 and 14x14 maps)
constexpr int64_t kFewNr = 64;     // output channels per register block (4 vectors)
constexpr int64_t kFewPanel = 28;  // positions per packed panel (4 blocks)
using ConvGemmFewKernel = void (*)(const float* xt, const float* wt, int64_t kc,
                                   int64_t vectors, float* acc, bool first);
// dst[kk][j] = w[c0 + j][k0 + kk] for kk < kc, j < kFewNr (rows past co zero); w is
// (co x depth), row-major.
using ConvGemmFewPackWeights = void (*)(const float* w, int64_t co, int64_t depth, int64_t c0,
                                        int64_t k0, int64_t kc, float* dst);
// o[c * ldo + i] = act(scale[c] * acc[i * kFewNr + c] + shift[c]) for i < np <= kFewMr,
// c < nc <= kFewNr (scale, shift may be null; act as in ConvEpilogue).
using ConvGemmFewStore = void (*)(const float* acc, int64_t np, int64_t nc, const float* scale,
                                  const float* shift, int act, float* o, int64_t ldo);
ConvGemmFewKernel conv_gemm_few_kernel_avx512();
ConvGemmFewStore conv_gemm_few_store_avx512();
ConvGemmFewPackWeights conv_gemm_few_pack_weights_avx512();

// Weight gradient of the same convolution, with the same panels and no im2col matrix:
//   gw[co][k] = sum_n sum_p gy[n][co][p] * X_n[k][p]
// gy (N, Co, out_h, out_w) and x (N, C, H, W) contiguous, gw (Co, C, kh, kw) overwritten.
// Computed transposed, gw^T (K x Co) += X (K x P) gy^T (P x Co), with the forward's register
// block turned around: kWgradMr rows k broadcast from the packed panels by 32 channels
// loaded from gy^T, whose chunk rows are gathered once per chunk. The threads split k (and,
// with few rows k, fixed shares of the positions), so the result does not depend on the
// number of threads.
// Numpy twin: framework/ops/conv_ref.py, conv2d_weight_grad_ref.
void conv_gemm_weight_grad(const float* x, const float* gy, int64_t co, const Conv2dGeometry& g,
                           float* gw);

constexpr int64_t kWgradMr = 12;  // rows k per register block
constexpr int64_t kWgradNr = 32;  // output channels per register block

// acc[r][0:kWgradNr] (row stride ldacc) += sum over the chunk's positions s of
// b(s)[r * kNr] * at[s * kWgradNr + 0:kWgradNr], r < kWgradMr; position s runs over lanes
// [0, nvalid[pn]) of panels pn < npanels, b(s) = b + pn * ldp + lane.
using WgradKernel = void (*)(const float* b, int64_t ldp, const int64_t* nvalid,
                             int64_t npanels, const float* at, float* acc, int64_t ldacc);
// Channel block cb of gy^T, contiguous so that a register block's rows stay in L1:
// at[cb * ldblock + s * kWgradNr + c] = gy_n(s)[cb * kWgradNr + c][p(s)], zero past co;
// position s runs over lanes [0, nvalid[i]) of the chunk's panels, whose image and first
// position are image[i], p0[i]; gy_n = gy + n * co * positions.
using WgradGather = void (*)(const float* gy, int64_t co, int64_t positions,
                             const int64_t* image, const int64_t* p0, const int64_t* nvalid,
                             int64_t npanels, float* at, int64_t ldblock);
WgradKernel conv_wgrad_kernel_avx512();
WgradGather conv_wgrad_gather_avx512();
WgradKernel conv_wgrad_kernel_avx2();
WgradGather conv_wgrad_gather_avx2();

// Pointwise layers (1x1, stride 1, no padding) on large maps take the weight gradient as dot
// products instead, with no gather and no packing: gw[o][c] = sum_n sum_p gy[n][o][p] *
// x[n][c][p], both rows contiguous along p. A register tile of kPwMo rows o by kPwMc rows c
// keeps one vector of partial sums per pair, over chunks of positions that stay in L2.
constexpr int64_t kPwMo = 4, kPwMc = 6, kPwLanes = 16;
// acc[(i * kPwMc + j) * kPwLanes + lane] (= if first, else +=) the lane's share of
// sum_{p < len} g[i][p] * x[j][p], i < kPwMo, j < kPwMc; lane = p % (the ISA's vector width,
// <= kPwLanes; lanes past it are zeros).
using WgradPointwiseKernel = void (*)(const float* const* g, const float* const* x,
                                      int64_t len, bool first, float* acc);
WgradPointwiseKernel conv_wgrad_pointwise_avx512();
WgradPointwiseKernel conv_wgrad_pointwise_avx2();

}  // namespace tianyuan
