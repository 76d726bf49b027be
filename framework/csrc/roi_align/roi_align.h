// RoIAlign (He et al., Mask R-CNN, 1703.06870) with torchvision's semantics
// (torchvision/csrc/ops/cpu/roi_align_kernel.cpp): each of a RoI's pooled_h x pooled_w bins
// averages grid_h x grid_w bilinear samples of its image's feature plane; the grid is
// sampling_ratio per axis, or ceil(roi side / pooled side) where sampling_ratio <= 0. With
// `aligned` the box is shifted by -0.5 pixel (pixel centres) and may be smaller than a
// pixel; without, each side is at least 1. A sample outside [-1, H] x [-1, W] is 0; inside,
// clamped to the plane. Generic C++ with OpenMP only: a sample's four taps are scattered
// loads, which vector ISAs do not speed up (framework/csrc/README.md).
//
// The binding (bind_roi_align.cpp) checks everything the pointer arithmetic relies on: the
// feature map's and the output's sizes, every RoI's batch index in [0, N) and finite
// coordinates, and each RoI's sample grid within kMaxRoiSamples; every tap is clamped into
// its plane by the kernel itself.
#pragma once

#include <cstdint>

namespace tianyuan {

// The most samples a single bin may take (grid_h x grid_w): an adaptive grid grows with the
// RoI, and a RoI far larger than any image would make one call run for hours.
constexpr int64_t kMaxRoiSamples = int64_t{1} << 24;

struct RoiAlignGeometry {
    int64_t n, c, h, w;          // the feature map (N, C, H, W)
    int64_t rois;                // R rois, each (batch index, x1, y1, x2, y2)
    int64_t pooled_h, pooled_w;  // the output (R, C, pooled_h, pooled_w)
    double spatial_scale;
    int64_t sampling_ratio;      // <= 0: adaptive
    bool aligned;
};

// A RoI's box in feature-map pixels and its sampling grid, as torchvision computes them in T.
template <typename T>
struct RoiBins {
    int64_t batch;
    T start_h, start_w, bin_h, bin_w;
    int64_t grid_h, grid_w;  // may be <= 0 for an empty box (aligned): no samples
    T count;                 // max(grid_h * grid_w, 1)
};
template <typename T>
RoiBins<T> roi_bins(const T* roi, const RoiAlignGeometry& g);

// out (R, C, pooled_h, pooled_w) from x (N, C, H, W) and rois (R, 5).
template <typename T>
void roi_align_forward(const T* x, const T* rois, const RoiAlignGeometry& g, T* out);

// grad_x (N, C, H, W), overwritten, from grad_out (R, C, pooled_h, pooled_w).
template <typename T>
void roi_align_backward(const T* grad_out, const T* rois, const RoiAlignGeometry& g, T* grad_x);

}  // namespace tianyuan
