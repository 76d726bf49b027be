// Image preprocessing kernels with OpenCV's semantics and arithmetic: resize (separable taps),
// affine warp, colour conversion, HWC -> CHW with normalisation. Images are (B, H, W, C)
// row-major, uint8 or float32. Numpy twins (the spec, with the formulas):
// framework/ops/resize_cv_ref.py (resize) and framework/ops/imgproc_ref.py (the rest).
//
// A resize's taps (which source indices, which weights, which arithmetic) are planned in
// Python (resize_cv_ref.resize_plan) and passed in: the kernels only combine them. Every
// index is clamped into the image by the plan and checked by the binding.
// Generic C++ with OpenMP over output rows, chosen through the family's table (imgproc.cpp).
#pragma once

#include <cstdint>

namespace tianyuan {

struct ImageGeometry {
    int64_t batch, h, w, c;  // input (B, H, W, C)
    int64_t oh, ow;          // output (B, OH, OW, C)
};

// One axis's taps: out index o reads index[o * k + t] with weight[o * k + t] (float) or
// fixed[o * k + t] (int16, the uint8 kinds' integer weights), t < k.
struct ResizeTaps {
    const int32_t* index;
    const float* weight;
    const int16_t* fixed;
    int64_t k;
};

// The uint8 arithmetic (resize_cv_ref's plan kinds).
enum class ResizeKind : int { nearest = 0, linear = 1, cubic = 2, box = 3, area = 4 };

void resize_u8(const uint8_t* src, uint8_t* dst, const ImageGeometry& g, const ResizeTaps& x,
               const ResizeTaps& y, ResizeKind kind, float box_scale);
// float32: weights in tap order (rows then columns); nearest is a gather (k = 1, weight 1).
void resize_f32(const float* src, float* dst, const ImageGeometry& g, const ResizeTaps& x,
                const ResizeTaps& y, bool nearest);

struct WarpParams {
    float m[6];          // output (x, y) -> source: sx = m0 x + (m1 y + m2), sy likewise
    bool nearest;        // else bilinear
    bool replicate;      // else constant `value`
    float value[4];      // per channel (C <= 4 for constant borders)
};
void warp_affine_u8(const uint8_t* src, uint8_t* dst, const ImageGeometry& g,
                    const WarpParams& p);
void warp_affine_f32(const float* src, float* dst, const ImageGeometry& g, const WarpParams& p);

// (B, H, W, 3) -> (B, H, W, 3) channels reversed; -> (B, H, W, 1) gray (blue_first: BGR in).
void swap_rb_u8(const uint8_t* src, uint8_t* dst, int64_t pixels);
void swap_rb_f32(const float* src, float* dst, int64_t pixels);
void gray_u8(const uint8_t* src, uint8_t* dst, int64_t pixels, bool blue_first);
void gray_f32(const float* src, float* dst, int64_t pixels, bool blue_first);
// NV12 (U first) / NV21 (V first): per image a (H * 3/2, W) plane, H and W even -> (H, W, 3).
void nv_to_rgb_u8(const uint8_t* src, uint8_t* dst, int64_t batch, int64_t h, int64_t w,
                  bool v_first, bool blue_first);

// (B, H, W, C) -> (B, C, H, W) float32: (x * scale - mean[c]) / std[c] (mean 0, std 1 where
// not given).
void to_chw_u8(const uint8_t* src, float* dst, int64_t batch, int64_t hw, int64_t c,
               float scale, const float* mean, const float* std);
void to_chw_f32(const float* src, float* dst, int64_t batch, int64_t hw, int64_t c,
                float scale, const float* mean, const float* std);

}  // namespace tianyuan
