// The int8 element-wise family's kernels (int8_ops.h: add, quantize, fake quantization,
// concat, pooling, the channels-last transpose and pools): one table, chosen once per ISA
// (runtime/dispatch.h) by int8_eltwise.cpp's fill_int8_eltwise. Each entry holds the ISA's
// kernel, or the generic one where the ISA has none; the drivers send the shapes a SIMD kernel
// does not take to the *_generic functions below (each driver says which).
#pragma once

#include <cstdint>

#include "int8_gemm/int8_ops.h"

namespace tianyuan {
namespace int8 {

struct EltwiseKernels {
    // a and b of one signedness
    void (*add)(const QIn& a, const QIn& b, int64_t size, const AddParams& p, uint8_t* out);
    void (*quantize)(const float* x, int64_t size, float scale, int32_t zp, bool out_signed,
                     uint8_t* out);
    void (*fake_quantize_run)(const FakeQuantRows& f, int64_t r, int64_t i0, int64_t i1,
                              float* y, uint8_t* inside);
    // a part whose rescale is not the identity
    void (*concat_part)(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                        int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner);
    // windows inside the plane, column stride 1 or 2
    void (*max_pool)(const QIn& x, const PoolGeom& g, uint8_t* out);
    // unpadded windows as wide as the plane (kw == w)
    void (*avg_pool_runs)(const QIn& x, const PoolGeom& g, uint8_t* out);
    void (*channels_last3)(const uint8_t* x, int64_t plane, int64_t len, uint8_t* out);
    void (*max_pool_nhwc)(const QIn& x, const PoolGeom& g, int64_t c, uint8_t* out);
    void (*avg_pool_global_nhwc)(const QIn& x, int64_t n, int64_t hw, int64_t c,
                                 int32_t* sums, uint8_t* out);
};
const EltwiseKernels& eltwise_kernels();

// The generic kernels (the reference's formulas in plain loops).
void add_generic(const QIn& a, const QIn& b, int64_t size, const AddParams& p, uint8_t* out);
void max_pool_generic(const QIn& x, const PoolGeom& g, uint8_t* out);
// unpadded windows of any width
void avg_pool_inside_generic(const QIn& x, const PoolGeom& g, uint8_t* out);
void channels_last3_generic(const uint8_t* x, int64_t plane, int64_t len, uint8_t* out);
void max_pool_nhwc_generic(const QIn& x, const PoolGeom& g, int64_t c, uint8_t* out);
void avg_pool_global_nhwc_generic(const QIn& x, int64_t n, int64_t hw, int64_t c,
                                  int32_t* sums, uint8_t* out);

}  // namespace int8
}  // namespace tianyuan
