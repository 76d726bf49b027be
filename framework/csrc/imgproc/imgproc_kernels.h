// The family's table (imgproc.cpp fills it once per ISA) and the generic kernels it points to.
#pragma once

#include "imgproc/imgproc.h"

namespace tianyuan {

struct ImgprocKernels {
    void (*resize_u8)(const uint8_t*, uint8_t*, const ImageGeometry&, const ResizeTaps&,
                      const ResizeTaps&, ResizeKind, float);
    void (*resize_f32)(const float*, float*, const ImageGeometry&, const ResizeTaps&,
                       const ResizeTaps&, bool);
    void (*warp_affine_u8)(const uint8_t*, uint8_t*, const ImageGeometry&, const WarpParams&);
    void (*warp_affine_f32)(const float*, float*, const ImageGeometry&, const WarpParams&);
    void (*nv_to_rgb_u8)(const uint8_t*, uint8_t*, int64_t, int64_t, int64_t, bool, bool);
    void (*to_chw_u8)(const uint8_t*, float*, int64_t, int64_t, int64_t, float, const float*,
                      const float*);
};

void resize_u8_generic(const uint8_t* src, uint8_t* dst, const ImageGeometry& g,
                       const ResizeTaps& x, const ResizeTaps& y, ResizeKind kind,
                       float box_scale);
void resize_f32_generic(const float* src, float* dst, const ImageGeometry& g,
                        const ResizeTaps& x, const ResizeTaps& y, bool nearest);
void warp_affine_u8_generic(const uint8_t* src, uint8_t* dst, const ImageGeometry& g,
                            const WarpParams& p);
void warp_affine_f32_generic(const float* src, float* dst, const ImageGeometry& g,
                             const WarpParams& p);
void nv_to_rgb_u8_generic(const uint8_t* src, uint8_t* dst, int64_t batch, int64_t h, int64_t w,
                          bool v_first, bool blue_first);
void to_chw_u8_generic(const uint8_t* src, float* dst, int64_t batch, int64_t hw, int64_t c,
                       float scale, const float* mean, const float* std);

}  // namespace tianyuan
