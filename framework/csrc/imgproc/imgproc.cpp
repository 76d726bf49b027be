// The imgproc family's entry points: each goes through the table, filled once per ISA
// (runtime/dispatch.h). Only generic kernels exist so far; an ISA's build is one more branch
// in fill_imgproc. The colour swaps, gray and float HWC -> CHW are plain loops, not in it.
#include "imgproc/imgproc_kernels.h"
#include "runtime/cpu.h"
#include "runtime/dispatch.h"

namespace tianyuan {
namespace {

void fill_imgproc(ImgprocKernels& k, Isa) {
    k = {resize_u8_generic, resize_f32_generic, warp_affine_u8_generic,
         warp_affine_f32_generic, nv_to_rgb_u8_generic, to_chw_u8_generic};
}

Dispatch<ImgprocKernels> kernels(fill_imgproc);

}  // namespace

void resize_u8(const uint8_t* src, uint8_t* dst, const ImageGeometry& g, const ResizeTaps& x,
               const ResizeTaps& y, ResizeKind kind, float box_scale) {
    kernels().resize_u8(src, dst, g, x, y, kind, box_scale);
}

void resize_f32(const float* src, float* dst, const ImageGeometry& g, const ResizeTaps& x,
                const ResizeTaps& y, bool nearest) {
    kernels().resize_f32(src, dst, g, x, y, nearest);
}

void warp_affine_u8(const uint8_t* src, uint8_t* dst, const ImageGeometry& g,
                    const WarpParams& p) {
    kernels().warp_affine_u8(src, dst, g, p);
}

void warp_affine_f32(const float* src, float* dst, const ImageGeometry& g, const WarpParams& p) {
    kernels().warp_affine_f32(src, dst, g, p);
}

void nv_to_rgb_u8(const uint8_t* src, uint8_t* dst, int64_t batch, int64_t h, int64_t w,
                  bool v_first, bool blue_first) {
    kernels().nv_to_rgb_u8(src, dst, batch, h, w, v_first, blue_first);
}

void to_chw_u8(const uint8_t* src, float* dst, int64_t batch, int64_t hw, int64_t c, float scale,
               const float* mean, const float* std) {
    kernels().to_chw_u8(src, dst, batch, hw, c, scale, mean, std);
}

}  // namespace tianyuan
