// int8 convolution, add, concat and pooling on NCHW u8/s8 tensors. Numpy twins:
// framework/quantization/reference.py (qconv2d, add, concat, quantize, max_pool2d, avg_pool2d).
// Signed inputs are handled as u8 with the sign bit flipped (x ^ 0x80) and zero point
// z + 128, which leaves every difference x - z unchanged.
#pragma once

#include <cstdint>

#include "int8_gemm/int8_gemm.h"

namespace tianyuan {
namespace int8 {

struct ConvGeom {
    int64_t n, c, h, w;          // input (N, C, H, W)
    int64_t oc, kh, kw;          // weight (OC, C/groups, kh, kw)
    int64_t sh, sw, dh, dw;      // stride, dilation
    int64_t pt, pb, pl, pr;      // padding top, bottom, left, right
    int64_t groups, oh, ow;      // output (N, OC, oh, ow)
};

// A tensor of quantized bytes and how to read them.
struct QIn {
    const uint8_t* data;
    bool is_signed;
    int32_t zero_point;
};

// x as u8: bytes xor flip_of(x), zero point zero_of(x).
static inline uint8_t flip_of(const QIn& x) { return x.is_signed ? 0x80 : 0; }
static inline int32_t zero_of(const QIn& x) { return x.zero_point + (x.is_signed ? 128 : 0); }

// Weights packed per group (group g at g * packed_size(OC/groups, C/groups*kh*kw)) with
// row sums (OC,); bias (OC,) s32; r carries per-channel multiplier/shift (step 1) and the
// output zero point/bounds (r.bias is ignored). out (N, OC, oh, ow).
// algo: which of the algorithms of int8_cgemm.h and int8_amx.h runs (automatic: a rule on
// the shape; AMX where the OS grants it, weights are packed for it, the shape fits and the
// tiles passed their check); direct needs C/groups % 4 == 0, amx the shapes amx_takes and
// wamx, packed_amx (the packed algorithm's blocks on AMX tiles, int8_amx.h) groups 1 and OC
// a multiple of 32 and wgemm (amx_gemm_weights), each on real tiles where granted and
// emulated ones elsewhere (std::invalid_argument otherwise). narrow: the weights' narrow form (int8_cgemm.h,
// split_narrow), which the AVX2 tiles without VNNI run faster with the same results; others
// read packed.
enum class ConvAlgo : int { automatic = 0, packed = 1, direct = 2, amx = 3, packed_amx = 4 };
struct NarrowWeights;
void conv2d(const QIn& x, const ConvGeom& g, const int8_t* packed, const int32_t* row_sums,
            const int32_t* bias, const Requant& r, uint8_t* out,
            ConvAlgo algo = ConvAlgo::automatic, const int8_t* wamx = nullptr,
            const NarrowWeights* narrow = nullptr, const int8_t* wgemm = nullptr);

// The VNNI depthwise kernel's constants of the weights w (OC, kh, kw), worked out once where
// the weights are fixed (Int8Conv): words (OC, kh, depthwise_words_per_row(kw)) s32, a kernel
// row's taps 4 to a word (zeros past kw), and sums (OC,), each channel's taps summed.
inline int depthwise_words_per_row(int64_t kw) { return kw <= 4 ? 1 : 2; }
void depthwise_consts(const int8_t* w, int64_t oc, int64_t kh, int64_t kw, int32_t* words,
                      int32_t* sums);

// Depthwise (groups == C, OC = C * multiplier): weight (OC, kh*kw) s8 unpacked, direct loops;
// words, sums: w's depthwise_consts.
void depthwise_conv2d(const QIn& x, const ConvGeom& g, const int8_t* w, const int32_t* bias,
                      const Requant& r, uint8_t* out, const int32_t* words,
                      const int32_t* sums);

// The VNNI depthwise kernel (int8_depthwise_vnni.cpp) and the geometries it takes:
// column dilation 1, column stride 1 or 2, kernels up to 8x8. Unpadded ones (stride 1,
// output as wide as the input) read the input in place through `masks` (built by
// int8_depthwise.cpp); the others pass nullptr and run on planes padded with the zero point.
bool depthwise_vnni_takes(const ConvGeom& g);
bool depthwise_vnni_unpadded(const ConvGeom& g);
void depthwise_conv2d_vnni(const QIn& x, const ConvGeom& g, const int32_t* words,
                           const int32_t* sums, const int32_t* bias, const Requant& r,
                           const uint64_t* masks, uint8_t* out);

// Linear: x (M, K) -> out (M, N) requantized; weights packed by pack_weights.
void linear(const QIn& x, int64_t m, int64_t k, const int8_t* packed, const int32_t* row_sums,
            int64_t n, const int32_t* bias, const Requant& r, uint8_t* out);

// Corrected s32 GEMM: c (M, N) = (x - zp) @ W^T (ldc = N).
void gemm_s32(const QIn& x, int64_t m, int64_t k, const int8_t* packed, const int32_t* row_sums,
              int64_t n, int32_t* c);

// out = clamp(round_half_up(((a - za) * ma + (b - zb) * mb) / 2^shift), lo - zo, hi - zo) + zo.
struct AddParams {
    int32_t m_a, m_b, shift, zero_point, lo, hi;
};

// The add's and the concat's requantization in 16-bit products (the AVX2 and AVX-512 units'
// add_range16 / rescale_row16). A multiplier M = Mh * 2^16 + Ml with Ml in [-2^15, 2^15) and
// Mh within int16 (split16: false where it is not); for centred inputs |d| <= 255 the sum
// S = da * Ma + db * Mb (db = 0 for a concat part) is H * 2^16 + L with H = da * Mah +
// db * Mbh and L = da * Mal + db * Mbl, each one vpmaddwd over (da, db) pairs, exact in s32
// (|H|, |L| < 2^24). For shifts s in [17, 47] the reference's floor((S + 2^(s-1)) / 2^s) is
// (H + 2^(s-17) + (L >> 16)) >> (s - 16): S + 2^(s-1) = (H + 2^(s-17)) * 2^16 + L, and the
// floor of a floor is the floor; H + 2^(s-17) stays below 2^31. The s64 form takes two
// halves of lanes and four vpmuldq where this takes two vpmaddwd.
struct Split16 {
    int32_t hi, lo;
};
constexpr int32_t kSplit16MinShift = 17, kSplit16MaxShift = 47;

inline bool split16(int32_t m, Split16* out) {
    const int64_t hi = (static_cast<int64_t>(m) + 32768) >> 16;
    if (hi < -32768 || hi > 32767) return false;
    *out = {static_cast<int32_t>(hi), static_cast<int32_t>(m - hi * 65536)};
    return true;
}

// Whether the 16-bit form takes these: the shift in range, each multiplier split, each zero
// point within the input type's range (so that d = x - z fits int16 with |d| <= 255).
inline bool split16_takes(int32_t shift, const int32_t* mults, const int32_t* zps, int n,
                          bool in_signed, Split16* out) {
    if (shift < kSplit16MinShift || shift > kSplit16MaxShift) return false;
    const int32_t lo = in_signed ? -128 : 0, hi = in_signed ? 127 : 255;
    for (int i = 0; i < n; ++i) {
        if (zps[i] < lo || zps[i] > hi || !split16(mults[i], out + i)) return false;
    }
    return true;
}
void add(const QIn& a, const QIn& b, int64_t size, const AddParams& p, uint8_t* out);
void add_avx512(const QIn& a, const QIn& b, int64_t size, const AddParams& p, uint8_t* out);
void add_avx2(const QIn& a, const QIn& b, int64_t size, const AddParams& p, uint8_t* out);

// One concat input, outer rows of inner bytes, rescaled into out rows of out_inner bytes at
// offset. Row o of x starts at x.data + (o / group) * group_stride + (o % group) * inner:
// a channel slice of a larger tensor is read in place (group rows per image, the images
// group_stride bytes apart); group = outer for a contiguous x.
struct PartRows {
    int64_t outer, inner, group, group_stride;
    const uint8_t* row(const uint8_t* data, int64_t o) const {
        return data + o / group * group_stride + o % group * inner;
    }
};
void concat_part(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                 int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner);
void concat_part_avx512(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                        int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner);
void concat_part_avx2(const QIn& x, const PartRows& rows, int32_t mult, int32_t shift,
                      int32_t out_zp, bool out_signed, uint8_t* out, int64_t out_inner);
// out[r * out_inner + i] = table[rows.row(data, r)[i]] for rows [r0, r1), i < rows.inner
// (AVX-512 VBMI, int8_lut_vbmi.cpp): the concat's rescale on the vnni level and above where
// the CPU has VBMI; the generic path looks up the same table.
void map_rows_vbmi(const uint8_t* table, const uint8_t* data, const PartRows& rows, int64_t r0,
                   int64_t r1, uint8_t* out, int64_t out_inner);

// float32 x (size,) -> clamp(round_half_even(x / scale) + zp) as u8/s8 (reference.quantize,
// per tensor; NaN gives the lowest value).
// The SIMD kernels ask for x kQuantizeAhead floats ahead: an int8 model's float input has left
// the cache by the next forward (whole vectors unmasked too: masked loads had not been
// prefetched). bench/RESULTS.md, other int8 ops.
constexpr int64_t kQuantizeAhead = 2048;
void quantize(const float* x, int64_t size, float scale, int32_t zp, bool out_signed,
              uint8_t* out);
void quantize_avx512(const float* x, int64_t size, float scale, int32_t zp, bool out_signed,
                     uint8_t* out);
void quantize_avx2(const float* x, int64_t size, float scale, int32_t zp, bool out_signed,
                   uint8_t* out);

// Fake quantization (quantization.fake_quant._fake_quant's y and mask), float32 x as (outer,
// C, inner) rows with per-channel scale[c], zp[c] (C = 1: per tensor): with r = round half to
// even of x / scale[c] (IEEE division), y = clamp(r, lo - zp[c], hi - zp[c]) * scale[c] and
// inside = lo - zp[c] <= r <= hi - zp[c] (0 for NaN: y is then (lo - zp[c]) * scale[c]).
struct FakeQuantRows {
    const float* x;
    int64_t outer, c, inner;
    const float* scale;
    const int32_t* zp;
    int32_t lo, hi;
};
void fake_quantize(const FakeQuantRows& f, float* y, uint8_t* inside);
// LSQ's scale gradient (fake_quant.LSQFunction, before its gradient scale): per channel c the
// sum of g * (v - (inside ? x / scale[c] : 0)) with v = y / scale[c] as an integer (y of
// fake_quantize, within 2^-16 of one), each term and the sum in double, the chunks added in
// a fixed order (independent of the thread count). ds (C,).
void lsq_scale_grad(const FakeQuantRows& f, const float* g, const float* y,
                    const uint8_t* inside, double* ds);
// One run [i0, i1) of row r (= o * C + c): the ISA kernels.
void fake_quantize_run_avx512(const FakeQuantRows& f, int64_t r, int64_t i0, int64_t i1,
                              float* y, uint8_t* inside);
void fake_quantize_run_avx2(const FakeQuantRows& f, int64_t r, int64_t i0, int64_t i1,
                            float* y, uint8_t* inside);

struct PoolGeom {
    int64_t planes, h, w, kh, kw, sh, sw, pt, pb, pl, pr, oh, ow;
};
// The pixels [lo, hi) of a window of k taps from `start` (negative: in the padding) inside
// [0, size): the loops of the generic pools, whose cost is the image's, not the kernel's.
struct WindowSpan {
    int64_t lo, hi;
};
static inline WindowSpan window_span(int64_t start, int64_t k, int64_t size) {
    const int64_t lo = start > 0 ? start : 0, end = start + k < size ? start + k : size;
    return {lo, end > lo ? end : lo};
}
void max_pool2d(const QIn& x, const PoolGeom& g, uint8_t* out);
void max_pool2d_avx512(const QIn& x, const PoolGeom& g, uint8_t* out);
void max_pool2d_avx2(const QIn& x, const PoolGeom& g, uint8_t* out);
void avg_pool2d(const QIn& x, const PoolGeom& g, bool count_include_pad, uint8_t* out);
// avg_pool2d's unpadded windows as wide as the plane (kw == w: global pooling).
void avg_pool_runs_avx512(const QIn& x, const PoolGeom& g, uint8_t* out);

// Channels-last activations (int8_conv_nhwc.h; int8_channels_last.cpp): x (N, C, H, W) bytes
// -> out (N, pt + H + pb, pl + W + pr, C), the border `fill` (the channels-last conv's image,
// padded with its zero point: no border tiles); max pooling of x (N, H, W, C) packed -> out
// (N, OH, OW, C), g.planes = N and c channels, padding never winning (qmin), like max_pool2d
// (the _avx512 twin: 64 channels a step).
struct Border {
    int64_t pt, pb, pl, pr;
    uint8_t fill;
};
void to_channels_last(const uint8_t* x, int64_t n, int64_t c, int64_t h, int64_t w,
                      const Border& pad, uint8_t* out);
// len pixels of 3 planes `plane` bytes apart -> out, interleaved.
void channels_last3_vbmi(const uint8_t* x, int64_t plane, int64_t len, uint8_t* out);
void max_pool2d_nhwc(const QIn& x, const PoolGeom& g, int64_t c, uint8_t* out);
void max_pool2d_nhwc_avx512(const QIn& x, const PoolGeom& g, int64_t c, uint8_t* out);
// Global average pooling of x (N, HW, C) packed -> out (N, C), as avg_pool2d; the ISA unit's
// with n * c words of scratch.
void avg_pool_global_nhwc(const QIn& x, int64_t n, int64_t hw, int64_t c, uint8_t* out);
void avg_pool_global_nhwc_avx512(const QIn& x, int64_t n, int64_t hw, int64_t c, int32_t* sums,
                                 uint8_t* out);

}  // namespace int8
}  // namespace tianyuan
