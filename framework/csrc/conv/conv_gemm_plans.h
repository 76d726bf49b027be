// Internal to the direct GEMM convolution (conv_gemm.cpp, conv_gemm_small.cpp; the public
// interface is conv_gemm.h): the call's shared state and the helpers both units use.
#pragma once

#include <cstdint>
#include <memory>

#include "conv/conv_gemm.h"

namespace tianyuan {
namespace conv_gemm_detail {

// What every work item of one call shares: the ISA's kernel and packer, sizes, the split.
struct Plan {
    ConvGemmKernel kernel;
    ConvGemmPack pack;
    const float* x;
    const float* packed_w;  // (co_blocks, depth, kMr)
    const ConvEpilogue* epi;
    float* out;
    const Conv2dGeometry* g;
    int64_t co, positions, depth, co_blocks, splits;
    int64_t per_image;  // pointwise: panels per image (x is read in place, image by image)
    int64_t panels;     // in the whole batch
    int64_t groups;     // of about kGroup consecutive panels
    bool pointwise;
};


// The row segments of the nvalid lanes from position p0 of the batch's positions (image n's
// start at n * positions; ow: output width).
int64_t row_segments(int64_t p0, int64_t nvalid, int64_t positions, int64_t ow,
                     ConvGemmSegment* seg);

// Panel t of the batch: its right-hand side rows [k0, k0 + kc) (packed into `panel`, or x
// in place) and where its output lanes go.
const float* panel_at(const Plan& p, int64_t t, int64_t k0, int64_t kc, float* panel,
                      int64_t* ldb, ConvGemmOut* o);

struct AlignedFloats {  // n floats at a 64-byte boundary (pack_row's aligned stores)
    explicit AlignedFloats(int64_t n) : raw(new float[n + 16]) {
        const uintptr_t at = reinterpret_cast<uintptr_t>(raw.get());
        data = reinterpret_cast<float*>((at + 63) & ~uintptr_t(63));
    }
    std::unique_ptr<float[]> raw;
    float* data;
};

// The plans for small maps (conv_gemm_small.cpp). stream_plan sets p's groups and splits
// for run_stream, or returns false where the panels need more than `threads` work items
// (threads 0: forced, as many as they need).
bool stream_plan(Plan* p, int64_t threads);
void run_stream(const Plan& p, ConvGemmPackWeights pack_w, const float* w, bool parallel);
bool few_plan_wins(const Plan& p, int64_t threads);
void run_few(const Plan& p, const float* w, int64_t threads);

}  // namespace conv_gemm_detail
}  // namespace tianyuan
