// pybind11 glue: RoIAlign forward and backward (roi_align/roi_align.h). Every RoI is checked
// before a kernel runs: finite values, a batch index in [0, N), a sample count within
// kMaxRoiSamples; the kernels clamp every tap into its plane.
#include <cmath>
#include <string>
#include <tuple>

#include "roi_align/roi_align.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
namespace {

using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t>;

[[noreturn]] void refuse_roi(const char* op, int64_t r, const std::string& why) {
    throw py::value_error(std::string(op) + ": roi " + std::to_string(r) + " " + why);
}

// An upper bound on a RoI's samples along one axis: pooled x its grid (torchvision's
// ceil(side / pooled), side at least 1), computed in double from the box.
double axis_samples(double lo, double hi, const RoiAlignGeometry& g, int64_t pooled) {
    if (g.sampling_ratio > 0) return static_cast<double>(pooled) * g.sampling_ratio;
    const double side = std::fabs(hi - lo) * std::fabs(g.spatial_scale) + 1.0;
    return static_cast<double>(pooled) * (std::ceil(side / pooled) + 1.0);
}

// The geometry, with rois (R, 5) checked against the feature map (N, C, H, W) of `shape`.
template <typename T>
RoiAlignGeometry checked_geometry(const char* op, const Array<T>& rois, Shape shape,
                                  Pair output_size, double spatial_scale,
                                  int64_t sampling_ratio, bool aligned) {
    auto [n, c, h, w] = shape;
    checked_shape(op, "the feature map", dims_of(shape));
    if (rois.ndim() != 2 || rois.shape(1) != 5)
        throw py::value_error(std::string(op) + ": rois must be (R, 5) (batch index, x1, y1, "
                              "x2, y2), got " + shape_str(rois));
    const RoiAlignGeometry g{n, c, h, w, rois.shape(0), output_size.first, output_size.second,
                             spatial_scale, sampling_ratio, aligned};
    if (g.pooled_h < 1 || g.pooled_w < 1)
        throw py::value_error(std::string(op) + ": output_size must be >= 1, got (" +
                              std::to_string(g.pooled_h) + ", " + std::to_string(g.pooled_w) +
                              ")");
    if (!std::isfinite(spatial_scale))
        throw py::value_error(std::string(op) + ": spatial_scale must be finite");
    if (g.rois > 0 && (h < 1 || w < 1))
        throw py::value_error(std::string(op) + ": the feature map " + dims_of(shape).str() +
                              " has an empty plane");
    checked_mul(checked_mul(checked_mul(g.rois, c, op, "R x C"), g.pooled_h, op, "the output"),
                g.pooled_w, op, "the output");
    const T* data = rois.data();
    for (int64_t r = 0; r < g.rois; ++r) {
        const T* roi = data + r * 5;
        for (int k = 0; k < 5; ++k)
            if (!std::isfinite(static_cast<double>(roi[k]))) refuse_roi(op, r, "is not finite");
        if (!(roi[0] >= 0 && static_cast<double>(roi[0]) < static_cast<double>(n)))
            refuse_roi(op, r, "has batch index " + std::to_string(static_cast<double>(roi[0])) +
                                  ", outside [0, " + std::to_string(n) + ")");
        const double samples = axis_samples(roi[2], roi[4], g, g.pooled_h) *
                               axis_samples(roi[1], roi[3], g, g.pooled_w);
        if (samples > static_cast<double>(kMaxRoiSamples))
            refuse_roi(op, r, "would take more than " + std::to_string(kMaxRoiSamples) +
                                  " samples (a box far larger than the feature map?)");
    }
    return g;
}

template <typename T>
py::array forward_typed(const py::array& x_any, const py::array& rois_any, Pair output_size,
                        double spatial_scale, int64_t sampling_ratio, bool aligned) {
    const char* op = "roi_align";
    Array<T> x = Array<T>::ensure(x_any);
    Array<T> rois = Array<T>::ensure(rois_any);
    if (x.ndim() != 4)
        throw py::value_error(std::string(op) + ": input must be (N, C, H, W), got " +
                              shape_str(x));
    const RoiAlignGeometry g =
        checked_geometry<T>(op, rois, {x.shape(0), x.shape(1), x.shape(2), x.shape(3)},
                            output_size, spatial_scale, sampling_ratio, aligned);
    Array<T> out({g.rois, g.c, g.pooled_h, g.pooled_w});
    py::gil_scoped_release release;
    roi_align_forward<T>(x.data(), rois.data(), g, out.mutable_data());
    return std::move(out);
}

template <typename T>
py::array backward_typed(const py::array& grad_any, const py::array& rois_any, Shape shape,
                         double spatial_scale, int64_t sampling_ratio, bool aligned) {
    const char* op = "roi_align_backward";
    Array<T> grad = Array<T>::ensure(grad_any);
    Array<T> rois = Array<T>::ensure(rois_any);
    if (grad.ndim() != 4)
        throw py::value_error(std::string(op) + ": grad must be (R, C, pooled_h, pooled_w), "
                              "got " + shape_str(grad));
    const RoiAlignGeometry g =
        checked_geometry<T>(op, rois, shape, {grad.shape(2), grad.shape(3)}, spatial_scale,
                            sampling_ratio, aligned);
    if (grad.shape(0) != g.rois || grad.shape(1) != g.c)
        throw py::value_error(std::string(op) + ": grad " + shape_str(grad) + " must have one "
                              "row per roi (" + std::to_string(g.rois) + ") and the input's " +
                              std::to_string(g.c) + " channels");
    Array<T> gx({g.n, g.c, g.h, g.w});
    py::gil_scoped_release release;
    roi_align_backward<T>(grad.data(), rois.data(), g, gx.mutable_data());
    return std::move(gx);
}

}  // namespace

void bind_roi_align(py::module_& m) {
    m.def(
        "roi_align",
        [](const py::array& x, const py::array& rois, Pair output_size, double spatial_scale,
           int64_t sampling_ratio, bool aligned) {
            return dispatch_float(
                "roi_align", "input", x,
                [&] { return forward_typed<float>(x, rois, output_size, spatial_scale,
                                                  sampling_ratio, aligned); },
                [&] { return forward_typed<double>(x, rois, output_size, spatial_scale,
                                                   sampling_ratio, aligned); });
        },
        "RoIAlign (R, C, pooled_h, pooled_w) of input (N, C, H, W) at rois (R, 5)");
    m.def(
        "roi_align_backward",
        [](const py::array& grad, const py::array& rois, Shape input_shape, double spatial_scale,
           int64_t sampling_ratio, bool aligned) {
            return dispatch_float(
                "roi_align_backward", "grad", grad,
                [&] { return backward_typed<float>(grad, rois, input_shape, spatial_scale,
                                                   sampling_ratio, aligned); },
                [&] { return backward_typed<double>(grad, rois, input_shape, spatial_scale,
                                                    sampling_ratio, aligned); });
        },
        "RoIAlign's input gradient (N, C, H, W) from grad (R, C, pooled_h, pooled_w)");
}

}  // namespace bind
}  // namespace tianyuan
