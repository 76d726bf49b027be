// What the int8 drivers share outside the kernels (generic translation units only): the
// zero-point correction of the bias, the padded input, and the packed convolution's blocks of
// positions (int8_cgemm_plan.cpp) as spans of images and runs along input rows. Defined in
// int8_cgemm_blocks.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "int8_cgemm/int8_cgemm.h"
#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

// bias - z * row_sums (bias null: 0), modulo 2^32: exact whenever the corrected result fits
// int32.
std::vector<int32_t> corrected_bias(const int32_t* bias, const int32_t* row_sums, int64_t n,
                                    int32_t z);

// x (N, C, H, W) -> (N, C, Hp, Wp) u8 with the sign bit flipped for s8 and the zero
// point as padding; x itself when nothing needs changing (needs_padding false). *end: the
// readable end (the padded copy has 2 * kPos bytes of slack, in the calling thread's
// Space::pad). pad_image writes image n's (C, Hp, Wp) alone to dst.
bool needs_padding(const QIn& x, const ConvGeom& g);
const uint8_t* padded_input(const QIn& x, const ConvGeom& g, int64_t hp, int64_t wp,
                            const uint8_t** end);
void pad_image(const QIn& x, const ConvGeom& g, int64_t hp, int64_t wp, int64_t n,
               uint8_t* dst);

// The images a block of positions of the batch covers: lanes [lane, lane + len) are image
// n's positions [q, q + len).
struct Span {
    int64_t n, q, lane, len;
};

// Block [p0, p0 + npos) of the batch's positions, p an image, as spans (at most npos).
int64_t block_spans(int64_t p, int64_t p0, int64_t npos, Span* spans);

// The block's positions as runs along input rows: output (n, oy, ox) reads from n * image +
// oy * row + ox * col past the group's first plane of image 0; contiguous runs merge.
int64_t block_runs(const ConvGeom& g, int64_t image, int64_t row, int64_t col,
                   const Span* spans, int64_t nspans, Run* runs);

// Asks for bytes [lo, hi) of an image's input into L2 (prefetcht1) while the tiles run: the
// per-image paths (direct_images, packed_images) take the next image's a slice a block.
static inline void prefetch_input(const uint8_t* p, int64_t lo, int64_t hi) {
    for (int64_t o = lo & ~int64_t{63}; o < hi; o += 64) __builtin_prefetch(p + o, 0, 2);
}

// Blocks of at most kPos positions over the batch's `all` positions on `threads` threads:
// their starts and `all` (int8_cgemm_blocks.cpp says how they are cut).
std::vector<int64_t> block_starts(int64_t all, int64_t threads);

}  // namespace int8
}  // namespace tianyuan
