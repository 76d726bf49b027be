// Colour conversion and HWC -> CHW; see imgproc.h and framework/ops/imgproc_ref.py
// (cvt_color_ref, nv_to_rgb, to_chw_ref), whose constants these are (OpenCV's fixed point).
#include <cstdint>

#include "imgproc/imgproc_kernels.h"

namespace tianyuan {
namespace {

constexpr int64_t kParallelMin = 1 << 15;
constexpr int32_t kGrayB = 3735, kGrayG = 19235, kGrayR = 9798;  // 15-bit, sum 2^15
constexpr int kYuvShift = 20;
constexpr int32_t kCy = 1220542, kCvr = 1673527, kCvg = -852492, kCug = -409993,
                  kCub = 2116026;

inline uint8_t clamp_u8(int32_t v) {
    return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One row pair of NV12/NV21: luma rows y0, y1 (w each), chroma row uv (w: u,v or v,u pairs).
void nv_rows(const uint8_t* y0, const uint8_t* y1, const uint8_t* uv, int64_t w, bool v_first,
             bool blue_first, uint8_t* out0, uint8_t* out1) {
    const int32_t half = 1 << (kYuvShift - 1);
    for (int64_t x = 0; x < w; x += 2) {
        const int32_t u = static_cast<int32_t>(uv[x + (v_first ? 1 : 0)]) - 128;
        const int32_t v = static_cast<int32_t>(uv[x + (v_first ? 0 : 1)]) - 128;
        const int32_t ruv = half + kCvr * v;
        const int32_t guv = half + kCvg * v + kCug * u;
        const int32_t buv = half + kCub * u;
        const uint8_t* luma[4] = {y0 + x, y0 + x + 1, y1 + x, y1 + x + 1};
        uint8_t* dst[4] = {out0 + x * 3, out0 + x * 3 + 3, out1 + x * 3, out1 + x * 3 + 3};
        for (int i = 0; i < 4; ++i) {
            const int32_t l = static_cast<int32_t>(*luma[i]) - 16;
            const int32_t y = (l < 0 ? 0 : l) * kCy;
            const uint8_t r = clamp_u8((y + ruv) >> kYuvShift);
            const uint8_t g = clamp_u8((y + guv) >> kYuvShift);
            const uint8_t b = clamp_u8((y + buv) >> kYuvShift);
            dst[i][0] = blue_first ? b : r;
            dst[i][1] = g;
            dst[i][2] = blue_first ? r : b;
        }
    }
}

template <typename T>
void to_chw(const T* src, float* dst, int64_t batch, int64_t hw, int64_t c, float scale,
            const float* mean, const float* std) {
#pragma omp parallel for collapse(2) schedule(static) if (batch * hw * c >= kParallelMin)
    for (int64_t b = 0; b < batch; ++b) {
        for (int64_t ch = 0; ch < c; ++ch) {
            const T* in = src + b * hw * c + ch;
            float* out = dst + (b * c + ch) * hw;
            const float m = mean ? mean[ch] : 0.f, s = std ? std[ch] : 1.f;
            for (int64_t i = 0; i < hw; ++i)
                out[i] = (static_cast<float>(in[i * c]) * scale - m) / s;
        }
    }
}

template <typename T>
void swap_rb(const T* src, T* dst, int64_t pixels) {
#pragma omp parallel for schedule(static) if (pixels >= kParallelMin)
    for (int64_t i = 0; i < pixels; ++i) {
        const T r = src[i * 3], g = src[i * 3 + 1], b = src[i * 3 + 2];
        dst[i * 3] = b;
        dst[i * 3 + 1] = g;
        dst[i * 3 + 2] = r;
    }
}

}  // namespace

void nv_to_rgb_u8_generic(const uint8_t* src, uint8_t* dst, int64_t batch, int64_t h, int64_t w,
                          bool v_first, bool blue_first) {
    const int64_t pairs = batch * (h / 2);
#pragma omp parallel for schedule(static) if (pairs * w * 2 >= kParallelMin)
    for (int64_t r = 0; r < pairs; ++r) {
        const int64_t b = r / (h / 2), yy = (r % (h / 2)) * 2;
        const uint8_t* plane = src + b * (h * 3 / 2) * w;
        uint8_t* out = dst + b * h * w * 3;
        nv_rows(plane + yy * w, plane + (yy + 1) * w, plane + (h + yy / 2) * w, w, v_first,
                blue_first, out + yy * w * 3, out + (yy + 1) * w * 3);
    }
}

void to_chw_u8_generic(const uint8_t* src, float* dst, int64_t batch, int64_t hw, int64_t c,
                       float scale, const float* mean, const float* std) {
    to_chw(src, dst, batch, hw, c, scale, mean, std);
}

void to_chw_f32(const float* src, float* dst, int64_t batch, int64_t hw, int64_t c, float scale,
                const float* mean, const float* std) {
    to_chw(src, dst, batch, hw, c, scale, mean, std);
}

void swap_rb_u8(const uint8_t* src, uint8_t* dst, int64_t pixels) { swap_rb(src, dst, pixels); }
void swap_rb_f32(const float* src, float* dst, int64_t pixels) { swap_rb(src, dst, pixels); }

void gray_u8(const uint8_t* src, uint8_t* dst, int64_t pixels, bool blue_first) {
    const int32_t cb = blue_first ? kGrayB : kGrayR, cr = blue_first ? kGrayR : kGrayB;
#pragma omp parallel for schedule(static) if (pixels >= kParallelMin)
    for (int64_t i = 0; i < pixels; ++i) {
        const uint8_t* p = src + i * 3;
        dst[i] = static_cast<uint8_t>((p[0] * cb + p[1] * kGrayG + p[2] * cr + (1 << 14)) >> 15);
    }
}

void gray_f32(const float* src, float* dst, int64_t pixels, bool blue_first) {
    const float cb = blue_first ? 0.114f : 0.299f, cg = 0.587f, cr = blue_first ? 0.299f : 0.114f;
#pragma omp parallel for schedule(static) if (pixels >= kParallelMin)
    for (int64_t i = 0; i < pixels; ++i) {
        const float* p = src + i * 3;
        dst[i] = p[0] * cb + p[1] * cg + p[2] * cr;
    }
}

}  // namespace tianyuan
