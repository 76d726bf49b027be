// pybind11 glue for the imgproc family (imgproc/imgproc.h). Images arrive as (B, H, W, C)
// uint8 or float32; every tap index is checked to lie in its axis before a kernel runs.
#include <cstring>
#include <string>
#include <vector>

#include "imgproc/imgproc.h"

#include "bind_common.h"

namespace tianyuan {
namespace bind {
namespace {

[[noreturn]] void refuse(const char* op, const std::string& why) {
    throw py::value_error(std::string(op) + ": " + why);
}

ImageGeometry image_geometry(const char* op, const py::array& src, Pair out) {
    if (src.ndim() != 4) refuse(op, "image must be (B, H, W, C), got " + shape_str(src));
    const ImageGeometry g{src.shape(0), src.shape(1), src.shape(2), src.shape(3), out.first,
                          out.second};
    if (g.h < 1 || g.w < 1 || g.c < 1) refuse(op, "empty image " + shape_str(src));
    if (g.oh < 1 || g.ow < 1) refuse(op, "output size must be >= 1, got (" +
                                         std::to_string(g.oh) + ", " + std::to_string(g.ow) + ")");
    checked_mul(checked_mul(checked_mul(g.batch, g.oh, op, "the output"), g.ow, op,
                            "the output"), g.c, op, "the output");
    return g;
}

// Keeps the arrays alive while the kernel reads their pointers.
struct TapArrays {
    Array<int32_t> index;
    Array<float> weight;
    Array<int16_t> fixed;
    ResizeTaps taps() const { return {index.data(), weight.data(), fixed.data(), index.shape(1)}; }
};

TapArrays checked_taps(const char* op, const char* axis, const py::array& index,
                       const py::array& weight, const py::array& fixed, int64_t out,
                       int64_t size) {
    TapArrays t{Array<int32_t>::ensure(index), Array<float>::ensure(weight),
                Array<int16_t>::ensure(fixed)};
    const std::string name = std::string(axis) + " taps";
    if (t.index.ndim() != 2 || t.index.shape(0) != out || t.index.shape(1) < 1)
        refuse(op, name + " must be (" + std::to_string(out) + ", K), got " + shape_str(t.index));
    for (const py::array* a : {static_cast<const py::array*>(&t.weight),
                               static_cast<const py::array*>(&t.fixed)})
        if (a->ndim() != 2 || a->shape(0) != out || a->shape(1) != t.index.shape(1))
            refuse(op, name + ": weights " + shape_str(*a) + " differ from the indices " +
                           shape_str(t.index));
    const int32_t* idx = t.index.data();
    for (int64_t i = 0; i < t.index.size(); ++i)
        if (idx[i] < 0 || idx[i] >= size)
            refuse(op, name + ": index " + std::to_string(idx[i]) + " outside [0, " +
                           std::to_string(size) + ")");
    return t;
}

py::array resize(const py::array& src, Pair out, const py::array& xi, const py::array& xw,
                 const py::array& xf, const py::array& yi, const py::array& yw,
                 const py::array& yf, int kind, double box_scale) {
    const char* op = "resize";
    const ImageGeometry g = image_geometry(op, src, out);
    const TapArrays x = checked_taps(op, "x", xi, xw, xf, g.ow, g.w);
    const TapArrays y = checked_taps(op, "y", yi, yw, yf, g.oh, g.h);
    if (kind < 0 || kind > 4) refuse(op, "unknown kind " + std::to_string(kind));
    if (has_dtype<uint8_t>(src)) {
        Array<uint8_t> s = Array<uint8_t>::ensure(src);
        Array<uint8_t> d({g.batch, g.oh, g.ow, g.c});
        py::gil_scoped_release release;
        resize_u8(s.data(), d.mutable_data(), g, x.taps(), y.taps(), static_cast<ResizeKind>(kind),
                  static_cast<float>(box_scale));
        return std::move(d);
    }
    if (!has_dtype<float>(src)) refuse(op, "image must be uint8 or float32");
    Array<float> s = Array<float>::ensure(src);
    Array<float> d({g.batch, g.oh, g.ow, g.c});
    py::gil_scoped_release release;
    resize_f32(s.data(), d.mutable_data(), g, x.taps(), y.taps(), kind == 0);
    return std::move(d);
}

py::array warp_affine(const py::array& src, Pair out, std::vector<double> m, bool nearest,
                      bool replicate, std::vector<double> value) {
    const char* op = "warp_affine";
    const ImageGeometry g = image_geometry(op, src, out);
    if (m.size() != 6) refuse(op, "the matrix must have 6 entries");
    if (g.h >= 4000000 || g.w >= 4000000) refuse(op, "images of 4e6 pixels a side or more");
    if (!replicate && (g.c > 4 || static_cast<int64_t>(value.size()) != g.c))
        refuse(op, "a constant border needs one value per channel (at most 4)");
    WarpParams p{};
    for (int i = 0; i < 6; ++i) p.m[i] = static_cast<float>(m[i]);
    p.nearest = nearest;
    p.replicate = replicate;
    for (size_t i = 0; i < value.size() && i < 4; ++i) p.value[i] = static_cast<float>(value[i]);
    if (has_dtype<uint8_t>(src)) {
        Array<uint8_t> s = Array<uint8_t>::ensure(src);
        Array<uint8_t> d({g.batch, g.oh, g.ow, g.c});
        py::gil_scoped_release release;
        warp_affine_u8(s.data(), d.mutable_data(), g, p);
        return std::move(d);
    }
    if (!has_dtype<float>(src)) refuse(op, "image must be uint8 or float32");
    Array<float> s = Array<float>::ensure(src);
    Array<float> d({g.batch, g.oh, g.ow, g.c});
    py::gil_scoped_release release;
    warp_affine_f32(s.data(), d.mutable_data(), g, p);
    return std::move(d);
}

template <typename T>
py::array channels(const py::array& src, bool gray, bool blue_first) {
    Array<T> s = Array<T>::ensure(src);
    if (s.ndim() != 4 || s.shape(3) != 3) refuse("cvt_color", "image must be (B, H, W, 3), got " +
                                                              shape_str(s));
    const int64_t pixels = s.shape(0) * s.shape(1) * s.shape(2);
    Array<T> d({s.shape(0), s.shape(1), s.shape(2), static_cast<py::ssize_t>(gray ? 1 : 3)});
    py::gil_scoped_release release;
    if constexpr (sizeof(T) == 1) {
        if (gray) gray_u8(s.data(), d.mutable_data(), pixels, blue_first);
        else swap_rb_u8(s.data(), d.mutable_data(), pixels);
    } else {
        if (gray) gray_f32(s.data(), d.mutable_data(), pixels, blue_first);
        else swap_rb_f32(s.data(), d.mutable_data(), pixels);
    }
    return std::move(d);
}

py::array nv_to_rgb(const py::array& src, bool v_first, bool blue_first) {
    Array<uint8_t> s = Array<uint8_t>::ensure(src);
    if (!has_dtype<uint8_t>(src) || s.ndim() != 3 || s.shape(1) % 3 || s.shape(1) < 3 ||
        s.shape(2) % 2 || s.shape(2) < 2)
        refuse("cvt_color", "NV12/NV21 must be uint8 (B, H * 3/2, W) with H and W even, got " +
                                shape_str(src));
    const int64_t b = s.shape(0), h = s.shape(1) / 3 * 2, w = s.shape(2);
    Array<uint8_t> d({b, h, w, int64_t{3}});
    py::gil_scoped_release release;
    nv_to_rgb_u8(s.data(), d.mutable_data(), b, h, w, v_first, blue_first);
    return std::move(d);
}

py::array to_chw(const py::array& src, double scale, const py::object& mean,
                 const py::object& std) {
    const char* op = "to_chw";
    if (src.ndim() != 4) refuse(op, "image must be (B, H, W, C), got " + shape_str(src));
    const int64_t b = src.shape(0), hw = src.shape(1) * src.shape(2), c = src.shape(3);
    std::vector<float> m, s;
    if (!mean.is_none()) m = mean.cast<std::vector<float>>();
    if (!std.is_none()) s = std.cast<std::vector<float>>();
    if ((!m.empty() && static_cast<int64_t>(m.size()) != c) ||
        (!s.empty() && static_cast<int64_t>(s.size()) != c))
        refuse(op, "mean and std need one value per channel (" + std::to_string(c) + ")");
    Array<float> d({b, c, static_cast<int64_t>(src.shape(1)), static_cast<int64_t>(src.shape(2))});
    const float* mp = m.empty() ? nullptr : m.data();
    const float* sp = s.empty() ? nullptr : s.data();
    if (has_dtype<uint8_t>(src)) {
        Array<uint8_t> a = Array<uint8_t>::ensure(src);
        py::gil_scoped_release release;
        to_chw_u8(a.data(), d.mutable_data(), b, hw, c, static_cast<float>(scale), mp, sp);
    } else {
        if (!has_dtype<float>(src)) refuse(op, "image must be uint8 or float32");
        Array<float> a = Array<float>::ensure(src);
        py::gil_scoped_release release;
        to_chw_f32(a.data(), d.mutable_data(), b, hw, c, static_cast<float>(scale), mp, sp);
    }
    return std::move(d);
}

}  // namespace

void bind_imgproc(py::module_& m) {
    m.def("imgproc_resize", &resize,
          "resize (B, H, W, C) uint8/float32 to (B, OH, OW, C) by planned taps "
          "(resize_cv_ref.resize_plan)");
    m.def("imgproc_warp_affine", &warp_affine,
          "affine warp (B, H, W, C) -> (B, OH, OW, C); m maps output to source");
    m.def(
        "imgproc_cvt_color",
        [](const py::array& src, bool gray, bool blue_first) {
            return has_dtype<uint8_t>(src) ? channels<uint8_t>(src, gray, blue_first)
                                           : channels<float>(src, gray, blue_first);
        },
        "(B, H, W, 3): channels reversed, or gray (B, H, W, 1)");
    m.def("imgproc_nv_to_rgb", &nv_to_rgb, "NV12/NV21 (B, H * 3/2, W) -> (B, H, W, 3) uint8");
    m.def("imgproc_to_chw", &to_chw,
          "(B, H, W, C) -> (B, C, H, W) float32: (x * scale - mean) / std per channel");
}

}  // namespace bind
}  // namespace tianyuan
